//! The kubelet's own endpoints, as the API server's node proxy reaches them.
//!
//! A kubelet serves HTTPS on port 10250 (`pkg/kubelet/server/server.go`). Besides the
//! streaming and log endpoints the API server calls for `pods/log`, `exec`, `attach` and
//! `portforward` (see [`crate::remotecommand`] and [`crate::logs`]), it answers:
//!
//! * `/healthz`: `ok` (`text/plain`) while the kubelet is healthy;
//! * `/pods`: a core/v1 `PodList` of the pods its pod manager holds, the ones bound to it;
//! * `/configz`: its running configuration, `{"kubeletconfig": {...}}` (a
//!   `KubeletConfiguration`);
//! * `/metrics`, `/stats/summary`, `/spec`, `/checkpoint`, `/debug/pprof`, ... .
//!
//! Clients reach them through the API server's proxy, `/api/v1/nodes/NAME/proxy/PATH`
//! (`kubectl get --raw /api/v1/nodes/NAME/proxy/pods`, authorized as `nodes/proxy`), which
//! the embedded server hands to [`crate::KubeletServer`] in process
//! ([`embedded_apiserver::kubelet::Kubelet::proxy`]); [`serve`] answers here.
//!
//! ## What the embedded node answers
//!
//! `/healthz` (`GET` or `HEAD`: the node is healthy while it runs), `/pods` (`GET`: the pods
//! bound to the node, read through the API as the node's user with the field selector
//! `spec.nodeName=<node>`, so their status is the one the node last wrote) and `/configz`
//! (`GET`: the few settings the embedded node has: `maxPods`, the kubelet's port, the runtime,
//! and for the simulated runtime the pods' run time). Another method on those paths is `405
//! Method Not Allowed`; every other path is `404 page not found` (no metrics, stats or
//! profiling: the node keeps none).

use std::time::Duration;

use embedded_apiserver::kubelet::Body;
use embedded_apiserver::kubelet::{ProxyRequest, not_found_text, text};
use embedded_apiserver::loopback::{ListParams, Resource};
use http::{Method, Response};
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::client::NodeApi;
use crate::runtime::NodeRuntime;

/// What `/configz` reports.
#[derive(Clone, Debug)]
pub struct KubeletSettings {
    /// The runtime that runs the pods.
    pub runtime: NodeRuntime,
    /// How many pods the node runs at once (the process runtime's limit; the kubelet's
    /// `maxPods` otherwise).
    pub max_pods: usize,
    /// How long a simulated one-shot container runs.
    pub pod_run_time: Duration,
}

/// The answer of the kubelet's endpoint `request.path` (see the module docs).
pub async fn serve(
    api: &NodeApi,
    settings: &KubeletSettings,
    request: ProxyRequest,
) -> Response<Body> {
    let read = request.method == Method::GET || request.method == Method::HEAD;
    match request.path.as_str() {
        "/healthz" | "/pods" | "/configz" if !read => text(405, "405 Method Not Allowed\n"),
        "/healthz" => text(200, "ok"),
        "/pods" => pods(api).await,
        "/configz" => json_response(200, &configz(api, settings)),
        _ => not_found_text(),
    }
}

/// `/pods`: the PodList of the pods bound to this node.
async fn pods(api: &NodeApi) -> Response<Body> {
    let selector = format!("spec.nodeName={}", api.node());
    let listed = api
        .loopback()
        .list(
            &Resource::core("pods"),
            None,
            &ListParams::fields(&selector),
        )
        .await;
    match listed {
        Ok(list) => {
            let items: Vec<Value> = list.items.into_iter().map(|p| p.into_value()).collect();
            json_response(
                200,
                &json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}),
            )
        }
        Err(e) => text(
            500,
            format!("listing the node's pods failed: {}\n", e.message),
        ),
    }
}

/// `/configz`: the settings the embedded node has, in `KubeletConfiguration`'s field names.
fn configz(api: &NodeApi, settings: &KubeletSettings) -> Value {
    let mut config = json!({
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "port": crate::kubelet::KUBELET_PORT,
        "maxPods": settings.max_pods,
        "containerRuntimeEndpoint": match settings.runtime {
            NodeRuntime::Simulated => "simulated://",
            NodeRuntime::Process => "process://",
        },
        "hostnameOverride": api.node(),
    });
    if settings.runtime == NodeRuntime::Simulated {
        config["podRunTime"] = json!(format!("{:?}", settings.pod_run_time));
    }
    json!({"kubeletconfig": config})
}

fn json_response(code: u16, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut r = Response::new(
        http_body_util::Full::new(bytes::Bytes::from(bytes))
            .map_err(|e| match e {})
            .boxed(),
    );
    *r.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::OK);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}
