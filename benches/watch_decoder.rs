//! Watch decoding throughput: how fast newline-delimited watch JSON turns into typed events,
//! for network-sized chunks (16 KiB) and for tiny ones (64 B, the worst case for the line
//! buffer). Run with `cargo bench -p benches --bench watch_decoder`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::ConfigMap;
use sample_client_go::client::WatchDecoder;

fn body(events: usize) -> Vec<u8> {
    let mut out = String::new();
    for i in 0..events {
        let t = ["ADDED", "MODIFIED", "DELETED"][i % 3];
        out.push_str(&format!(
            r#"{{"type":"{t}","object":{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{i}","namespace":"default","resourceVersion":"{i}","labels":{{"app":"bench"}}}},"data":{{"key":"{}"}}}}}}"#,
            "v".repeat(200)
        ));
        out.push('\n');
    }
    out.into_bytes()
}

fn decode(c: &mut Criterion) {
    let bytes = body(1000);
    let mut group = c.benchmark_group("watch_decoder");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    for chunk in [64usize, 16 * 1024] {
        group.bench_with_input(BenchmarkId::new("chunk", chunk), &chunk, |b, &chunk| {
            b.iter(|| {
                let mut d = WatchDecoder::<ConfigMap>::new();
                let mut n = 0;
                for part in bytes.chunks(chunk) {
                    n += d.push(part).len();
                }
                assert_eq!(n, 1000);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
