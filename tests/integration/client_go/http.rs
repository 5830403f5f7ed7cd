//! The client against a purpose-built HTTP(S) server: every verb's request shape, error
//! mapping, Retry-After, the throttle over virtual time, paging, watch streams, HTTP/2 over TLS,
//! client certificates, tokens and the CONNECT proxy.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::Version;
use k8s_openapi::api::core::v1::Pod;
use sample_client_go::client::config::{Auth, Secret};
use sample_client_go::client::{
    Api, Client, DeleteParams, DeleteResponse, Error, ListParams, Patch, PatchParams, PostParams,
    PropagationPolicy, WatchEvent, WatchParams,
};
use serde_json::json;
use support::client::*;

fn pod_json(name: &str, rv: &str) -> serde_json::Value {
    json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":name,"namespace":"ns","resourceVersion":rv}})
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(pod_json(name, "1")).unwrap()
}

fn unthrottled(mut c: sample_client_go::client::Config) -> Client {
    c.qps = 0.0;
    Client::new(c).unwrap()
}

#[tokio::test]
async fn every_verb_sends_the_right_request() {
    let server = serve_http(Arc::new(|r: &Logged| match (r.method.as_str(), r.path()) {
        ("GET", "/api/v1/namespaces/ns/pods") => json(
            200,
            json!({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[pod_json("a","5")]}),
        ),
        ("GET", "/api/v1/namespaces/ns/pods/a") => json(200, pod_json("a", "5")),
        ("GET", "/version") => json(
            200,
            json!({"major":"1","minor":"33","gitVersion":"v1.33.0","gitCommit":"","gitTreeState":"clean",
                   "buildDate":"","goVersion":"","compiler":"","platform":"linux/amd64"}),
        ),
        ("POST", _) | ("PUT", _) | ("PATCH", _) => json(200, pod_json("a", "6")),
        ("DELETE", "/api/v1/namespaces/ns/pods/a") => json(
            200,
            json!({"kind":"Status","apiVersion":"v1","status":"Success","details":{"name":"a"}}),
        ),
        ("DELETE", "/api/v1/namespaces/ns/pods") => json(
            200,
            json!({"kind":"PodList","apiVersion":"v1","metadata":{},"items":[pod_json("a","5")]}),
        ),
        _ => status(404, "NotFound", "no route"),
    }))
    .await;
    let client = unthrottled(server.config());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ns");

    assert_eq!(client.apiserver_version().await.unwrap().minor, "33");
    let p = pods.get("a").await.unwrap();
    assert_eq!(p.metadata.resource_version.as_deref(), Some("5"));
    let list = pods
        .list(&ListParams {
            label_selector: Some("app=x".into()),
            limit: Some(10),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(list.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(list.items.len(), 1);
    let pp = PostParams {
        dry_run: true,
        field_manager: Some("ctl".into()),
    };
    pods.create(&pp, &pod("a")).await.unwrap();
    pods.update(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    pods.update_status(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    let patches = [
        Patch::Merge(json!({"metadata":{"labels":{"a":"b"}}})),
        Patch::Json(json!([{"op":"add","path":"/metadata/labels/a","value":"b"}])),
        Patch::Strategic(json!({"metadata":{"labels":{"a":"b"}}})),
    ];
    for p in &patches {
        pods.patch("a", &PatchParams::default(), p).await.unwrap();
    }
    let apply = Patch::Apply(pod_json("a", ""));
    assert!(
        pods.patch("a", &PatchParams::default(), &apply)
            .await
            .is_err(),
        "apply without a field manager is refused client-side"
    );
    pods.patch_status(
        "a",
        &PatchParams {
            field_manager: Some("ctl".into()),
            force: true,
            ..Default::default()
        },
        &apply,
    )
    .await
    .unwrap();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    match pods.delete("a", &dp).await.unwrap() {
        DeleteResponse::Status(s) => assert_eq!(s.status.as_deref(), Some("Success")),
        other => panic!("expected Status, got {other:?}"),
    }
    match pods
        .delete_collection(
            &DeleteParams::default(),
            &ListParams {
                label_selector: Some("app=x".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap()
    {
        DeleteResponse::Object(l) => assert_eq!(l.items.len(), 1),
        other => panic!("expected a list, got {other:?}"),
    }

    let log = server.requests();
    let lines: Vec<String> = log
        .iter()
        .map(|r| {
            format!(
                "{} {} {}",
                r.method,
                r.uri,
                r.header("content-type").unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(
        lines,
        vec![
            "GET /version -",
            "GET /api/v1/namespaces/ns/pods/a -",
            "GET /api/v1/namespaces/ns/pods?labelSelector=app%3Dx&limit=10 -",
            "POST /api/v1/namespaces/ns/pods?dryRun=All&fieldManager=ctl application/json",
            "PUT /api/v1/namespaces/ns/pods/a application/json",
            "PUT /api/v1/namespaces/ns/pods/a/status application/json",
            "PATCH /api/v1/namespaces/ns/pods/a application/merge-patch+json",
            "PATCH /api/v1/namespaces/ns/pods/a application/json-patch+json",
            "PATCH /api/v1/namespaces/ns/pods/a application/strategic-merge-patch+json",
            "PATCH /api/v1/namespaces/ns/pods/a/status?fieldManager=ctl&force=true application/apply-patch+yaml",
            "DELETE /api/v1/namespaces/ns/pods/a application/json",
            "DELETE /api/v1/namespaces/ns/pods?labelSelector=app%3Dx application/json",
        ]
    );
    let del: serde_json::Value = serde_json::from_slice(&log[10].body).unwrap();
    assert_eq!(del["propagationPolicy"], "Foreground");
    assert_eq!(del["gracePeriodSeconds"], 0);
    assert_eq!(del["kind"], "DeleteOptions");
    let ua = log[0].header("user-agent").unwrap();
    assert!(ua.starts_with("sample-controller/"), "{ua}");
    assert!(
        log[0]
            .header("accept")
            .unwrap()
            .contains("application/json")
    );
    assert!(
        log[0].header("authorization").is_none(),
        "no credentials configured"
    );
}

#[tokio::test]
async fn error_codes_map_to_helpers() {
    let server = serve_http(Arc::new(|r: &Logged| match r.path() {
        "/api/v1/namespaces/ns/pods/missing" => {
            status(404, "NotFound", "pods \"missing\" not found")
        }
        "/api/v1/namespaces/ns/pods/exists" => status(409, "AlreadyExists", "exists"),
        "/api/v1/namespaces/ns/pods/stale" => status(409, "Conflict", "modified"),
        "/api/v1/namespaces/ns/pods/gone" => status(410, "Expired", "too old"),
        "/api/v1/namespaces/ns/pods/bad" => status(422, "Invalid", "spec.x: Invalid value"),
        "/api/v1/namespaces/ns/pods/busy" => status(429, "TooManyRequests", "slow down"),
        _ => http::Response::builder()
            .status(502)
            .body(full("<html><body>Bad Gateway</body></html>"))
            .unwrap(),
    }))
    .await;
    let pods: Api<Pod> = Api::namespaced(unthrottled(server.config()), "ns");
    assert!(pods.get("missing").await.unwrap_err().is_not_found());
    assert!(pods.get_opt("missing").await.unwrap().is_none());
    let e = pods.get("exists").await.unwrap_err();
    assert!(e.is_already_exists() && !e.is_conflict());
    assert!(pods.get("stale").await.unwrap_err().is_conflict());
    assert!(pods.get("gone").await.unwrap_err().is_gone());
    assert!(pods.get("bad").await.unwrap_err().is_invalid());
    // 429 without Retry-After is not retried (client-go's rule needs the header).
    assert!(pods.get("busy").await.unwrap_err().is_too_many_requests());
    match pods.get("proxy").await.unwrap_err() {
        Error::Http { code, excerpt } => {
            assert_eq!(code, 502);
            assert!(excerpt.contains("Bad Gateway"));
        }
        other => panic!("expected Http error, got {other:?}"),
    }
    let m = pods.client().metrics().snapshot();
    assert_eq!(m.too_many_requests, 1);
    assert_eq!(m.requests[&("GET".to_string(), 404)], 2);
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_and_bounded() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = calls.clone();
    let server = serve_http(Arc::new(move |r: &Logged| {
        if r.path().ends_with("/always") {
            return http::Response::builder()
                .status(503)
                .header("retry-after", "1")
                .body(full("overloaded"))
                .unwrap();
        }
        if r.path().ends_with("/no-header") {
            return status(500, "InternalError", "boom");
        }
        if c2.fetch_add(1, Ordering::SeqCst) == 0 {
            http::Response::builder()
                .status(429)
                .header("retry-after", "3")
                .body(full(
                    json!({"kind":"Status","reason":"TooManyRequests","code":429,"message":"later"})
                        .to_string(),
                ))
                .unwrap()
        } else {
            json(200, pod_json("a", "1"))
        }
    }))
    .await;
    let mut cfg = server.config();
    cfg.timeout = None;
    let pods: Api<Pod> = Api::namespaced(unthrottled(cfg), "ns");
    pods.get("a").await.unwrap();
    let log = server.requests();
    assert_eq!(log.len(), 2, "one 429 then the retry");
    assert!(
        log[1].at - log[0].at >= Duration::from_secs(3),
        "the retry came before Retry-After elapsed: {:?}",
        log[1].at - log[0].at
    );
    let m = pods.client().metrics().snapshot();
    assert_eq!((m.too_many_requests, m.retries), (1, 1));

    // A 5xx without Retry-After is returned at once.
    assert!(pods.get("no-header").await.unwrap_err().is_internal_error());
    assert_eq!(server.requests().len(), 3);

    // A 5xx with Retry-After forever: 1 attempt + 10 retries, then the error.
    let e = pods.get("always").await.unwrap_err();
    assert!(e.is_service_unavailable(), "{e}");
    let always = server
        .requests()
        .iter()
        .filter(|r| r.path().ends_with("/always"))
        .count();
    assert_eq!(always, 11);
}

#[tokio::test(start_paused = true)]
async fn throttle_caps_the_rate_but_not_watches() {
    let server = serve_http(Arc::new(|r: &Logged| {
        if r.query().contains("watch=true") {
            chunked(vec![])
        } else {
            json(200, pod_json("a", "1"))
        }
    }))
    .await;
    let mut cfg = server.config();
    cfg.qps = 5.0;
    cfg.burst = 3;
    cfg.timeout = None;
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    let start = tokio::time::Instant::now();
    for _ in 0..13 {
        pods.get("a").await.unwrap();
    }
    let log = server.requests();
    // Token bucket: at virtual time t at most burst + qps*t requests may have gone out.
    for r in &log {
        let t = (r.at - start).as_secs_f64();
        let allowed = 3.0 + 5.0 * t + 1e-6;
        assert!(
            (r.index + 1) as f64 <= allowed,
            "request {} at {t:.3}s exceeds burst 3 + 5/s",
            r.index
        );
    }
    // 13 requests with a burst of 3 need 10 refills at 5/s: at least 2 s of virtual time.
    let elapsed = (log[12].at - start).as_secs_f64();
    assert!(elapsed >= 2.0 - 1e-6, "{elapsed}");
    assert!(pods.client().metrics().snapshot().throttle_wait >= Duration::from_secs(2));

    // Watches skip the bucket: five at once, no virtual time passes.
    let t0 = tokio::time::Instant::now();
    for _ in 0..5 {
        let mut w = pods.watch(&WatchParams::default()).await.unwrap();
        assert!(w.next().await.is_none());
    }
    assert_eq!(tokio::time::Instant::now(), t0);
}

/// client-go throttles the first attempt before the request timeout starts: a request queued
/// behind the throttle for longer than the timeout is still sent, and answered.
#[tokio::test]
async fn the_throttle_wait_does_not_count_against_the_request_timeout() {
    let server = serve_http(Arc::new(|_r: &Logged| json(200, pod_json("a", "1")))).await;
    let mut cfg = server.config();
    cfg.qps = 1.0;
    cfg.burst = 1;
    cfg.timeout = Some(Duration::from_millis(300));
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    // Two at once: the first takes the only token, the second waits about a second for the
    // next one, far longer than the timeout, and then still has 300 ms for its answer.
    let (a, b) = tokio::join!(pods.get("a"), pods.get("a"));
    a.unwrap();
    b.unwrap();
    let m = pods.client().metrics().snapshot();
    assert_eq!(m.requests[&("GET".to_string(), 200)], 2);
    assert!(m.throttle_wait > Duration::from_millis(300), "{m:?}");
    assert_eq!(m.rate_limiter_latency["GET"].count, 2);
}

#[tokio::test]
async fn list_all_pages_and_falls_back_when_the_token_expires() {
    let expire = Arc::new(AtomicUsize::new(0));
    let e2 = expire.clone();
    let server = serve_http(Arc::new(move |r: &Logged| {
        let q = r.query().to_string();
        let page = |items: Vec<serde_json::Value>, cont: &str| {
            json(
                200,
                json!({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"40","continue":cont},"items":items}),
            )
        };
        if !q.contains("limit=") {
            return page(
                vec![pod_json("a", "1"), pod_json("b", "2"), pod_json("c", "3"), pod_json("d", "4"), pod_json("e", "5")],
                "",
            );
        }
        if q.contains("continue=t2") && e2.load(Ordering::SeqCst) == 1 {
            return status(410, "Expired", "The provided continue parameter is too old");
        }
        if q.contains("continue=t1") {
            page(vec![pod_json("c", "3"), pod_json("d", "4")], "t2")
        } else if q.contains("continue=t2") {
            page(vec![pod_json("e", "5")], "")
        } else {
            page(vec![pod_json("a", "1"), pod_json("b", "2")], "t1")
        }
    }))
    .await;
    let pods: Api<Pod> = Api::namespaced(unthrottled(server.config()), "ns");
    let lp = ListParams {
        limit: Some(2),
        resource_version: Some("0".into()),
        ..Default::default()
    };
    let all = pods.list_all(&lp).await.unwrap();
    let names: Vec<_> = all
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
    assert_eq!(all.metadata.resource_version.as_deref(), Some("40"));
    assert!(all.metadata.continue_.is_none());
    let queries: Vec<_> = server
        .requests()
        .iter()
        .map(|r| r.query().to_string())
        .collect();
    assert_eq!(
        queries,
        [
            "limit=2&resourceVersion=0",
            "limit=2&continue=t1",
            "limit=2&continue=t2"
        ]
    );

    expire.store(1, Ordering::SeqCst);
    let all = pods.list_all(&lp).await.unwrap();
    assert_eq!(all.items.len(), 5, "full list after the expired token");
    let last = server.requests().last().unwrap().query().to_string();
    assert_eq!(last, "resourceVersion=0");
}

#[tokio::test]
async fn watch_stream_decodes_events_split_across_chunks() {
    let mut body = String::new();
    for (t, rv) in [("ADDED", "1"), ("MODIFIED", "2"), ("DELETED", "3")] {
        body += &json!({"type": t, "object": pod_json("a", rv)}).to_string();
        body.push('\n');
    }
    body += "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"9\"}}}\n";
    body += "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"reason\":\"Expired\",\"code\":410,\"message\":\"too old resource version: 1 (9)\"}}\n";
    let bytes = Bytes::from(body);
    let chunks: Vec<Bytes> = (0..bytes.len())
        .step_by(7)
        .map(|i| bytes.slice(i..(i + 7).min(bytes.len())))
        .collect();
    let server = serve_http(Arc::new(move |r: &Logged| {
        if r.uri.contains("resourceVersion=old") {
            return status(410, "Gone", "too old");
        }
        chunked(chunks.clone())
    }))
    .await;
    let pods: Api<Pod> = Api::all(unthrottled(server.config()));
    let wp = WatchParams {
        resource_version: Some("1".into()),
        allow_watch_bookmarks: true,
        timeout_seconds: Some(300),
        label_selector: Some("app=x".into()),
        ..Default::default()
    };
    let events: Vec<_> = pods.watch(&wp).await.unwrap().collect().await;
    let events: Vec<_> = events.into_iter().map(|e| e.unwrap()).collect();
    assert_eq!(events.len(), 5);
    assert!(
        matches!(&events[0], WatchEvent::Added(p) if p.metadata.resource_version.as_deref() == Some("1"))
    );
    assert!(matches!(&events[1], WatchEvent::Modified(_)));
    assert!(matches!(&events[2], WatchEvent::Deleted(_)));
    assert!(
        matches!(&events[3], WatchEvent::Bookmark(b) if b.resource_version == "9" && !b.initial_events_end)
    );
    match &events[4] {
        WatchEvent::Error(s) => assert!(Error::from_status(s.clone()).is_gone()),
        other => panic!("{other:?}"),
    }
    let req = &server.requests()[0];
    assert_eq!(req.path(), "/api/v1/pods");
    assert_eq!(
        req.query(),
        "watch=true&labelSelector=app%3Dx&resourceVersion=1&allowWatchBookmarks=true&timeoutSeconds=300"
    );
    // A watch refused outright with 410 is an error that is_gone.
    let wp = WatchParams {
        resource_version: Some("old".into()),
        ..Default::default()
    };
    let err = match pods.watch(&wp).await {
        Err(e) => e,
        Ok(_) => panic!("expected 410"),
    };
    assert!(err.is_gone());
}

#[tokio::test]
async fn https_negotiates_http2_and_sends_the_token() {
    let server = serve_https(Arc::new(|_r: &Logged| json(200, pod_json("a", "1")))).await;
    let mut cfg = server.config();
    cfg.auth = Auth::Bearer {
        token: Some(Secret::new("abc123")),
        file: None,
    };
    let pods: Api<Pod> = Api::namespaced(unthrottled(cfg), "ns");
    pods.get("a").await.unwrap();
    pods.get("a").await.unwrap();
    let log = server.requests();
    assert_eq!(log[0].version, Version::HTTP_2);
    assert_eq!(log[0].header("authorization"), Some("Bearer abc123"));
    assert!(!log[0].client_cert);

    // A client that does not trust the CA fails with a transport error naming the cause.
    let mut cfg = server.config();
    cfg.tls.ca_pem = Some(pki().ca_pem.into_bytes());
    cfg.max_retries = 0;
    let other: Api<Pod> = Api::namespaced(unthrottled(cfg), "ns");
    let e = other.get("a").await.unwrap_err();
    assert!(e.is_tls(), "expected a TLS failure, got {e:?}");
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");

    // insecure-skip-tls-verify connects anyway.
    let mut cfg = server.config();
    cfg.tls.ca_pem = None;
    cfg.tls.insecure_skip_tls_verify = true;
    let insecure: Api<Pod> = Api::namespaced(unthrottled(cfg), "ns");
    insecure.get("a").await.unwrap();

    // A CA together with insecure is refused, as clientcmd does.
    let mut cfg = server.config();
    cfg.tls.insecure_skip_tls_verify = true;
    assert!(Client::new(cfg).is_err());
}

#[tokio::test]
async fn client_certificate_and_tls_server_name() {
    let server = serve_https(Arc::new(|_r: &Logged| json(200, pod_json("a", "1")))).await;
    let pki = server.pki.clone().unwrap();
    let mut cfg = server.config();
    cfg.tls.client_cert_pem = Some(pki.client_cert_pem.clone().into_bytes());
    cfg.tls.client_key_pem = Some(Secret::new(pki.client_key_pem.clone()));
    // The URL says 127.0.0.1; verify the certificate against "localhost" instead.
    cfg.tls.server_name = Some("localhost".into());
    let pods: Api<Pod> = Api::namespaced(unthrottled(cfg), "ns");
    pods.get("a").await.unwrap();
    assert!(server.requests()[0].client_cert);

    let mut cfg = server.config();
    cfg.tls.server_name = Some("not-in-the-cert.example".into());
    cfg.max_retries = 0;
    let wrong: Api<Pod> = Api::namespaced(unthrottled(cfg), "ns");
    let e = wrong.get("a").await.unwrap_err();
    assert!(
        e.is_tls(),
        "a certificate for another name is a TLS failure: {e:?}"
    );

    let mut cfg = server.config();
    cfg.tls.client_cert_pem = Some(b"not pem".to_vec());
    cfg.tls.client_key_pem = Some(Secret::new(pki.client_key_pem.clone()));
    let e = Client::new(cfg).unwrap_err().to_string();
    assert!(e.contains("client-certificate"), "{e}");
}

#[tokio::test]
async fn connect_proxy_tunnels_requests() {
    let server = serve_https(Arc::new(|_r: &Logged| json(200, pod_json("a", "1")))).await;
    let (proxy, seen, stop) = connect_proxy().await;
    let mut cfg = server.config();
    cfg.proxy_url = Some(format!("http://{proxy}").parse().unwrap());
    let pods: Api<Pod> = Api::namespaced(unthrottled(cfg), "ns");
    pods.get("a").await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![server.addr.to_string()]);
    assert_eq!(server.requests().len(), 1);
    stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn connection_refused_is_not_retried_for_any_verb() {
    // A port bound but not listening, held for the test: connections are refused.
    let closed = crate::support::net::closed_port();
    let addr = closed.local_addr().unwrap();
    let mut cfg = sample_client_go::client::Config::new(format!("http://{addr}").parse().unwrap());
    cfg.qps = 0.0;
    cfg.timeout = None;
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    match pods.get("a").await {
        Err(e @ Error::Transport(_)) => assert!(e.is_connection_refused(), "{e:?}"),
        other => panic!("expected connection refused, got {other:?}"),
    }
    assert!(matches!(
        pods.watch(&WatchParams::default()).await,
        Err(Error::Transport(_))
    ));
    assert!(matches!(
        pods.create(&PostParams::default(), &pod("a")).await,
        Err(Error::Transport(_))
    ));
    let m = pods.client().metrics().snapshot();
    assert_eq!(m.requests[&("GET".to_string(), 0)], 2, "one GET, one watch");
    assert_eq!(m.requests[&("POST".to_string(), 0)], 1);
    assert_eq!(m.retries, 0, "{:?}", m.retries_by_code);
    // One whole request, timed once.
    assert_eq!(m.request_latency["GET"].count, 1);
}

/// A server that resets the first `resets` connections as soon as a request arrives (`SO_LINGER`
/// 0: the client sees ECONNRESET) and answers every later one with the pod `a`.
async fn resetting_server(resets: usize) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let seen = conns.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => got.extend_from_slice(&buf[..k]),
                    }
                }
                if n < resets {
                    // Linger 0 makes the close an immediate RST (no blocking: nothing to send).
                    #[allow(deprecated)]
                    sock.set_linger(Some(Duration::ZERO)).unwrap();
                    drop(sock);
                    return;
                }
                let body = pod_json("a", "1").to_string();
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (addr, conns)
}

#[tokio::test]
async fn a_reset_connection_retries_a_get_but_not_a_write() {
    let (addr, conns) = resetting_server(2).await;
    let mut cfg = sample_client_go::client::Config::new(format!("http://{addr}").parse().unwrap());
    cfg.qps = 0.0;
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    // Reset twice, answered on the third connection.
    let got = pods.get("a").await.unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("a"));
    assert_eq!(conns.load(Ordering::SeqCst), 3);
    let m = pods.client().metrics().snapshot();
    // Two failed attempts (no status: 0), then the answer; the last two attempts were retries.
    assert_eq!(m.requests[&("GET".to_string(), 0)], 2, "{m:?}");
    assert_eq!(m.requests[&("GET".to_string(), 200)], 1, "{m:?}");
    assert_eq!(m.retries, 2, "{m:?}");

    // A write on a reset connection may have been applied: it is not sent again.
    let (addr, conns) = resetting_server(1).await;
    let mut cfg = sample_client_go::client::Config::new(format!("http://{addr}").parse().unwrap());
    cfg.qps = 0.0;
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    assert!(matches!(
        pods.create(&PostParams::default(), &pod("a")).await,
        Err(Error::Transport(_))
    ));
    assert_eq!(conns.load(Ordering::SeqCst), 1);
    assert_eq!(pods.client().metrics().snapshot().retries, 0);
}

#[tokio::test]
async fn a_get_on_a_connection_that_keeps_resetting_gives_up_after_max_retries() {
    let (addr, conns) = resetting_server(usize::MAX).await;
    let mut cfg = sample_client_go::client::Config::new(format!("http://{addr}").parse().unwrap());
    cfg.qps = 0.0;
    cfg.max_retries = 2;
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    match pods.get("a").await {
        Err(Error::Transport(m)) => assert!(m.to_string().to_lowercase().contains("reset"), "{m}"),
        other => panic!("expected a transport error, got {other:?}"),
    }
    assert_eq!(conns.load(Ordering::SeqCst), 3, "1 attempt + 2 retries");
}

#[tokio::test(start_paused = true)]
async fn requests_time_out_but_watches_do_not() {
    let event = Bytes::from(format!(
        "{}\n",
        json!({"type":"ADDED","object":pod_json("a","1")})
    ));
    let server = serve_http(Arc::new(move |_r: &Logged| stalled(event.clone()))).await;
    let mut cfg = server.config();
    cfg.qps = 0.0;
    cfg.timeout = Some(Duration::from_secs(5));
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    match pods.get("a").await {
        Err(Error::Timeout(m)) => assert!(m.contains("5s"), "{m}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    // The watch delivers its event and then simply waits, long past the request timeout.
    let mut w = pods.watch(&WatchParams::default()).await.unwrap();
    assert!(matches!(w.next().await, Some(Ok(WatchEvent::Added(_)))));
    let quiet = tokio::time::timeout(Duration::from_secs(3600), w.next()).await;
    assert!(quiet.is_err(), "the watch stayed open for the virtual hour");
}

#[tokio::test]
async fn watches_and_requests_multiplex_over_one_http2_connection() {
    let event = Bytes::from(format!(
        "{}\n",
        json!({"type":"ADDED","object":pod_json("a","1")})
    ));
    let server = serve_https(Arc::new(move |r: &Logged| {
        if r.query().contains("watch=true") {
            stalled(event.clone())
        } else {
            json(200, pod_json("a", "1"))
        }
    }))
    .await;
    let pods: Api<Pod> = Api::namespaced(unthrottled(server.config()), "ns");
    // Warm the pool so every later request finds the HTTP/2 connection.
    pods.get("a").await.unwrap();
    let mut watches = Vec::new();
    for _ in 0..3 {
        let mut w = pods.watch(&WatchParams::default()).await.unwrap();
        assert!(matches!(w.next().await, Some(Ok(WatchEvent::Added(_)))));
        watches.push(w);
    }
    pods.get("a").await.unwrap();
    let log = server.requests();
    assert_eq!(log.len(), 5);
    assert!(
        log.iter()
            .all(|r| r.version == Version::HTTP_2 && r.conn == 0),
        "{:?}",
        log.iter().map(|r| (r.version, r.conn)).collect::<Vec<_>>()
    );
}
