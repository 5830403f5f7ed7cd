//! A hundred API servers in one test process at once, as a suite that gives every test a server
//! of its own runs them: each one started with the builder's defaults (HTTPS, its own CA and
//! token), each answering on its own port, none accepting another's token or trusted with
//! another's CA, and the memory they hold together reported per server.
//!
//! The memory is the process's resident set (`VmRSS` of `/proc/self/status`) before and after,
//! divided by the number of servers. It is printed, not asserted against a tight figure: other
//! tests of this binary may run in the same process (`cargo test` runs them as threads), and a
//! debug build holds more than the release build `cargo bench -p benches --bench test_server`
//! measures (docs/09). The bound below only catches a server that holds ten times what it should.

use std::collections::HashSet;

use embedded_apiserver::{ApiServer, ApiServerHandle};
use support::apiserver::TestClient;

use crate::support;

const SERVERS: usize = 100;

/// The process's resident set in KiB (0 where `/proc` is not there).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn client_of(h: &ApiServerHandle) -> TestClient {
    TestClient::from_parts(h.url(), h.token(), h.ca_pem(), false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_servers_run_at_once_in_one_process() {
    let before = rss_kib();
    let mut starting = tokio::task::JoinSet::new();
    for _ in 0..SERVERS {
        starting.spawn(ApiServer::builder().start());
    }
    let mut servers = Vec::with_capacity(SERVERS);
    while let Some(started) = starting.join_next().await {
        servers.push(started.unwrap().unwrap());
    }
    assert_eq!(servers.len(), SERVERS);

    // Each one answers, as itself: its own fresh cluster (the `kubernetes` Service on its own
    // port), its own address.
    let mut answering = 0;
    for h in &servers {
        let c = client_of(h);
        let version = c.get("/version").await;
        assert_eq!(version.code, 200, "{}: {:?}", h.url(), version.body);
        let svc = c
            .get("/api/v1/namespaces/default/services/kubernetes")
            .await;
        assert_eq!(svc.code, 200, "{}: {:?}", h.url(), svc.body);
        let port = h.url().rsplit(':').next().unwrap().parse::<u64>().unwrap();
        assert_eq!(svc.body["spec"]["ports"][0]["targetPort"], port);
        answering += 1;
    }
    assert_eq!(answering, SERVERS);
    let distinct = |f: fn(&ApiServerHandle) -> String| -> usize {
        servers.iter().map(f).collect::<HashSet<_>>().len()
    };
    assert_eq!(distinct(|h| h.url().to_owned()), SERVERS);
    assert_eq!(distinct(|h| h.token().to_owned()), SERVERS);
    assert_eq!(
        distinct(|h| h.ca_pem().unwrap_or_default().to_owned()),
        SERVERS
    );

    // Identities do not cross: server 1's token is refused by server 0, and a client that
    // trusts only server 1's CA cannot verify server 0.
    let (a, b) = (&servers[0], &servers[1]);
    let wrong_token = TestClient::from_parts(a.url(), b.token(), a.ca_pem(), false);
    assert_eq!(wrong_token.get("/api/v1/namespaces").await.code, 401);
    let wrong_ca = TestClient::from_parts(a.url(), a.token(), b.ca_pem(), false);
    let refused = wrong_ca.try_get("/version").await;
    assert!(
        refused.is_err(),
        "a client trusting another server's CA verified {}: {refused:?}",
        a.url()
    );

    let after = rss_kib();
    let per_server_mib = after.saturating_sub(before) as f64 / SERVERS as f64 / 1024.0;
    println!(
        "{SERVERS} servers at once: RSS {before} KiB before, {after} KiB after, \
         {per_server_mib:.2} MiB per server"
    );
    if before > 0 {
        assert!(
            per_server_mib < 120.0,
            "{per_server_mib:.1} MiB per idle server"
        );
    }
    for h in &servers {
        h.shutdown().await;
    }
}
