//! The generated CustomResourceDefinitions, compiled into the binary.
//!
//! Before the API server accepts a single `At`, somebody has to create the CRD that defines
//! `ats.cnat.programming-kubernetes.info`: normally `kubectl apply -f artifacts/crds/`. The demo
//! and the tests install them into the embedded API server themselves, and must not depend on
//! the working directory to find the files, so this module embeds them with `include_str!`.
//!
//! The YAML files are *generated* from the types in this module's parent by the `codegen/`
//! crate (`hack/update-codegen.sh`); never edit them by hand, `hack/verify-codegen.sh` (and
//! CI) fails when they no longer match the Rust types.
//!
//! Three views of the same data:
//!
//! * [`ALL`]: `(crd name, yaml text)` pairs, in a fixed order;
//! * [`crd_yaml`]`::<K>()`: the text for one kind;
//! * [`crd_value`] / [`all_values`] as `serde_json::Value` (what an API server stores), and
//!   [`crd`] / [`all_crds`] as k8s-openapi's typed `CustomResourceDefinition`.
//!
//! ```
//! use sample_operators::apis::{At, crds};
//!
//! let crd = crds::crd::<At>().unwrap();
//! assert_eq!(crd.spec.names.plural, "ats");
//! assert_eq!(crd.spec.versions[0].name, "v1");
//! assert_eq!(crds::ALL.len(), 5);
//! ```

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::CustomResourceExt;

/// `ats.cnat.programming-kubernetes.info`.
pub const AT_YAML: &str =
    include_str!("../../../artifacts/crds/ats.cnat.programming-kubernetes.info.yaml");
/// `tdsets.schedule.rs`.
pub const TDSET_YAML: &str = include_str!("../../../artifacts/crds/tdsets.schedule.rs.yaml");
/// `redisclusters.cache.example.com`.
pub const REDISCLUSTER_YAML: &str =
    include_str!("../../../artifacts/crds/redisclusters.cache.example.com.yaml");
/// `myapps.example.com`.
pub const MYAPP_YAML: &str = include_str!("../../../artifacts/crds/myapps.example.com.yaml");
/// `foos.samplecontroller.k8s.io`.
pub const FOO_YAML: &str =
    include_str!("../../../artifacts/crds/foos.samplecontroller.k8s.io.yaml");

/// Every CRD of this crate: `(metadata.name, YAML text)`. The name is `<plural>.<group>`, the
/// same as [`CustomResourceExt::crd_name`] and as the file name under `artifacts/crds/`
/// without `.yaml`.
pub const ALL: &[(&str, &str)] = &[
    ("ats.cnat.programming-kubernetes.info", AT_YAML),
    ("tdsets.schedule.rs", TDSET_YAML),
    ("redisclusters.cache.example.com", REDISCLUSTER_YAML),
    ("myapps.example.com", MYAPP_YAML),
    ("foos.samplecontroller.k8s.io", FOO_YAML),
];

/// Why an embedded CRD could not be returned.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The kind is not one of the embedded five.
    #[error("no embedded CRD named {name:?}")]
    NotEmbedded {
        /// The CRD name that was looked up.
        name: String,
    },
    /// The embedded text does not parse (only possible after a hand edit of the YAML).
    #[error("embedded CRD {name:?} does not parse: {source}")]
    Parse {
        /// The CRD name.
        name: String,
        /// The YAML error, with line and column.
        #[source]
        source: serde_yaml_ng::Error,
    },
}

/// The YAML text of the CRD named `name` (`<plural>.<group>`), if embedded.
pub fn yaml_by_name(name: &str) -> Option<&'static str> {
    ALL.iter().find(|(n, _)| *n == name).map(|(_, y)| *y)
}

/// The YAML text of `K`'s CRD.
pub fn crd_yaml<K: CustomResourceExt>() -> Result<&'static str, CrdError> {
    let name = K::crd_name();
    yaml_by_name(&name).ok_or(CrdError::NotEmbedded { name })
}

/// `K`'s CRD as a JSON value, the form an API server stores and a client sends.
pub fn crd_value<K: CustomResourceExt>() -> Result<serde_json::Value, CrdError> {
    parse(&K::crd_name(), crd_yaml::<K>()?)
}

/// `K`'s CRD as k8s-openapi's typed `CustomResourceDefinition`.
pub fn crd<K: CustomResourceExt>() -> Result<CustomResourceDefinition, CrdError> {
    parse(&K::crd_name(), crd_yaml::<K>()?)
}

/// Every CRD as a JSON value, in the order of [`ALL`].
pub fn all_values() -> Result<Vec<serde_json::Value>, CrdError> {
    ALL.iter().map(|(name, yaml)| parse(name, yaml)).collect()
}

/// Every CRD, typed, in the order of [`ALL`].
pub fn all_crds() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    ALL.iter().map(|(name, yaml)| parse(name, yaml)).collect()
}

/// Why [`install`] failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The embedded CRD could not be read.
    #[error(transparent)]
    Crd(#[from] CrdError),
    /// The API server refused the create (anything but AlreadyExists).
    #[error("creating the CRD {name}: {source}")]
    Api {
        /// The CRD name.
        name: String,
        /// The server's answer.
        #[source]
        source: sample_client_go::client::Error,
    },
}

/// Creates `K`'s CRD in the cluster behind `client`, as `kubectl apply -f artifacts/crds/` would;
/// a CRD that already exists is left as it is and counts as success. The demo and the tests use
/// it to prepare an empty API server.
pub async fn install<K: CustomResourceExt>(
    client: &sample_client_go::client::Client,
) -> Result<(), InstallError> {
    let crd = crd::<K>()?;
    match sample_client_go::client::Api::<CustomResourceDefinition>::cluster(client.clone())
        .create(&sample_client_go::client::PostParams::default(), &crd)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_already_exists() => Ok(()),
        Err(source) => Err(InstallError::Api {
            name: K::crd_name(),
            source,
        }),
    }
}

/// The At CRD with `conversion.strategy: Webhook` calling `client_config` (an
/// `apiextensions.k8s.io/v1` `WebhookClientConfig`: `{"service": {"namespace", "name", "path",
/// "port"}}` or `{"url": ...}`, plus `caBundle`, base64 PEM), with `conversionReviewVersions:
/// ["v1"]`: the base CRD of `artifacts/crds/` with `artifacts/deploy/webhook/crd-conversion-patch.yaml`
/// applied, as kubebuilder's `config/crd/patches/webhook_in_ats.yaml` does. The demo and the
/// tests install it so that requests in the two versions go through the manager's `/convert`.
pub fn at_crd_with_conversion_webhook(
    client_config: serde_json::Value,
) -> Result<serde_json::Value, CrdError> {
    let mut crd = crd_value::<super::At>()?;
    crd["spec"]["conversion"] = serde_json::json!({
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": client_config,
            "conversionReviewVersions": ["v1"],
        },
    });
    Ok(crd)
}

fn parse<T: serde::de::DeserializeOwned>(name: &str, yaml: &str) -> Result<T, CrdError> {
    serde_yaml_ng::from_str(yaml).map_err(|source| CrdError::Parse {
        name: name.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::{At, Foo, MyApp, RedisCluster, TDSet};

    fn check<K: CustomResourceExt>() {
        let value = crd_value::<K>().unwrap();
        assert_eq!(value["metadata"]["name"], K::crd_name().as_str());
        assert_eq!(value["spec"]["group"], K::GROUP);
        assert_eq!(value["spec"]["names"]["kind"], K::KIND);
        assert_eq!(value["spec"]["versions"][0]["name"], K::VERSION);
        let typed = crd::<K>().unwrap();
        assert_eq!(typed.spec.names.plural, K::PLURAL);
    }

    #[test]
    fn every_kind_finds_its_own_crd() {
        check::<At>();
        check::<TDSet>();
        check::<RedisCluster>();
        check::<MyApp>();
        check::<Foo>();
    }

    #[test]
    fn all_is_parseable_and_names_match_the_documents() {
        let values = all_values().unwrap();
        assert_eq!(values.len(), ALL.len());
        for ((name, _), value) in ALL.iter().zip(&values) {
            assert_eq!(value["metadata"]["name"], *name);
            assert_eq!(value["kind"], "CustomResourceDefinition");
        }
        assert_eq!(all_crds().unwrap().len(), ALL.len());
        assert!(yaml_by_name("pods.core").is_none());
    }

    #[test]
    fn the_at_crd_serves_two_versions_and_the_patch_adds_the_webhook() {
        let crd = crd_value::<At>().unwrap();
        let versions = crd["spec"]["versions"].as_array().unwrap();
        let names: Vec<&str> = versions
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["v1", "v1alpha1"]);
        assert_eq!(versions[0]["storage"], true);
        assert_eq!(versions[1]["storage"], false);
        assert_eq!(versions[1]["deprecated"], true);
        assert_eq!(crd["spec"]["conversion"]["strategy"], "None");
        let url = serde_json::json!({"url": "https://127.0.0.1:9443/convert", "caBundle": "Zm9v"});
        let patched = at_crd_with_conversion_webhook(url.clone()).unwrap();
        assert_eq!(patched["spec"]["conversion"]["strategy"], "Webhook");
        assert_eq!(
            patched["spec"]["conversion"]["webhook"]["clientConfig"],
            url
        );
        assert_eq!(
            patched["spec"]["conversion"]["webhook"]["conversionReviewVersions"],
            serde_json::json!(["v1"])
        );
        // The typed model accepts it: what a client sends.
        serde_json::from_value::<CustomResourceDefinition>(patched).unwrap();
    }

    #[test]
    fn parse_error_names_the_crd() {
        let err = parse::<serde_json::Value>("x.example.com", "a: [unclosed").unwrap_err();
        assert!(err.to_string().contains("x.example.com"), "{err}");
    }
}
