//! CEL validation rules in the embedded API server: what compiling a CRD's rules costs (once per
//! CRD write) and what running them costs per custom-resource write, with the WebApp CRD of
//! `artifacts/examples/cel/` (six rules: a root rule, two on `spec`, a transition rule, a
//! comprehension over `ports`, a status rule). Run with `cargo bench -p benches --bench cel_rules`.

use criterion::{Criterion, criterion_group, criterion_main};
use embedded_apiserver::internals::cel_rules;
use serde_json::{Value, json};

fn schema() -> Value {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../artifacts/examples/cel/crd-webapps.yaml"
    ))
    .expect("artifacts/examples/cel/crd-webapps.yaml");
    let crd: Value = serde_yaml_ng::from_str(&text).expect("the WebApp CRD parses");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

fn webapp(ports: usize, class: &str) -> Value {
    json!({"apiVersion": "cel.example.com/v1", "kind": "WebApp",
           "metadata": {"name": "web", "namespace": "default"},
           "spec": {"image": "nginx:1.27", "minReplicas": 1, "maxReplicas": 3,
                    "storageClass": class, "ports": (1..=ports).map(|p| p as i64 * 10).collect::<Vec<_>>()},
           "status": {"observedGeneration": 1}})
}

fn bench(c: &mut Criterion) {
    let schema = schema();
    let mut group = c.benchmark_group("cel_rules");
    group.bench_function("compile_webapp_crd", |b| {
        b.iter(|| cel_rules::compile(&schema, "spec.validation.openAPIV3Schema"))
    });
    let validator = match cel_rules::compile(&schema, "spec.validation.openAPIV3Schema") {
        Ok(Some(v)) => v,
        other => panic!("the WebApp CRD's rules compile: {other:?}"),
    };
    let small = webapp(2, "fast");
    let full = webapp(16, "fast");
    group.bench_function("create_2_ports", |b| {
        b.iter(|| assert!(validator.validate(&small, None).is_empty()))
    });
    group.bench_function("create_16_ports", |b| {
        b.iter(|| assert!(validator.validate(&full, None).is_empty()))
    });
    group.bench_function("update_16_ports_with_transition_rules", |b| {
        b.iter(|| assert!(validator.validate(&full, Some(&small)).is_empty()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
