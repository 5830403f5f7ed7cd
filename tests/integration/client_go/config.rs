//! kubeconfig, loading rules and in-cluster configuration: one fixture per auth kind and per
//! error the user can make, token-file rotation, exec credential plugins, `KUBECONFIG` merging.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use sample_client_go::client::config::{Auth, InteractiveMode, Secret};
use sample_client_go::client::{Api, Client, Config, ConfigOptions};
use serde_json::json;
use support::client::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/client")
        .join(name)
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A kubeconfig with one context "ctx" -> cluster "c" (server) -> user "u" (the given YAML).
fn kubeconfig(server: &str, cluster_extra: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: ctx\nclusters:\n- name: c\n  cluster:\n    server: {server}\n{cluster_extra}users:\n- name: u\n  user:\n{user}contexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n    namespace: team\n"
    )
}

fn err_of(yaml: &str) -> String {
    Config::from_kubeconfig_yaml(yaml, None)
        .unwrap_err()
        .to_string()
}

#[test]
fn every_auth_kind_is_read() {
    let s = "https://127.0.0.1:6443";
    let c = Config::from_kubeconfig_yaml(&kubeconfig(s, "", "    token: abc\n"), None).unwrap();
    assert_eq!(
        c.auth,
        Auth::Bearer {
            token: Some(Secret::new("abc")),
            file: None
        }
    );
    assert_eq!(c.default_namespace, "team");

    let dir = tempfile::tempdir().unwrap();
    let tf = dir.path().join("tok");
    std::fs::write(&tf, "filetoken\n").unwrap();
    let c = Config::from_kubeconfig_yaml(
        &kubeconfig(s, "", &format!("    tokenFile: {}\n", tf.display())),
        None,
    )
    .unwrap();
    assert_eq!(
        c.auth,
        Auth::Bearer {
            token: None,
            file: Some(tf.clone())
        }
    );

    let c = Config::from_kubeconfig_yaml(
        &kubeconfig(s, "", "    username: admin\n    password: hunter2\n"),
        None,
    )
    .unwrap();
    assert!(
        matches!(&c.auth, Auth::Basic { username, password } if username == "admin" && password.expose() == "hunter2")
    );
    assert!(!format!("{c:?}").contains("hunter2"));

    for (crt, key) in [
        ("rsa.crt", "rsa-pkcs1.key"),
        ("ec.crt", "ec-sec1.key"),
        ("ec.crt", "ec-pkcs8.key"),
    ] {
        let cert = std::fs::read(fixture(crt)).unwrap();
        let keyb = std::fs::read(fixture(key)).unwrap();
        // -data form
        let c = Config::from_kubeconfig_yaml(
            &kubeconfig(
                s,
                "",
                &format!(
                    "    client-certificate-data: {}\n    client-key-data: {}\n",
                    b64(&cert),
                    b64(&keyb)
                ),
            ),
            None,
        )
        .unwrap();
        assert_eq!(c.tls.client_cert_pem.as_deref(), Some(&cert[..]));
        Client::new(c).unwrap_or_else(|e| panic!("{key}: {e}"));
        // file form
        let c = Config::from_kubeconfig_yaml(
            &kubeconfig(
                s,
                "",
                &format!(
                    "    client-certificate: {}\n    client-key: {}\n",
                    fixture(crt).display(),
                    fixture(key).display()
                ),
            ),
            None,
        )
        .unwrap();
        Client::new(c).unwrap();
    }

    let c = Config::from_kubeconfig_yaml(
        &kubeconfig(
            s,
            "",
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: /usr/bin/get-token\n      args: [--x]\n      env:\n      - {name: A, value: b}\n      installHint: install it\n",
        ),
        None,
    )
    .unwrap();
    match &c.auth {
        Auth::Exec(e) => {
            assert_eq!(e.command, "/usr/bin/get-token");
            assert_eq!(e.args, ["--x"]);
            assert_eq!(
                e.interactive_mode,
                InteractiveMode::IfAvailable,
                "v1beta1 default"
            );
            assert_eq!(e.install_hint.as_deref(), Some("install it"));
        }
        other => panic!("{other:?}"),
    }

    let pki = pki();
    let c = Config::from_kubeconfig_yaml(
        &kubeconfig(
            s,
            &format!(
                "    certificate-authority-data: {}\n    tls-server-name: api.local\n    proxy-url: http://proxy:3128\n",
                b64(pki.ca_pem.as_bytes())
            ),
            "    token: t\n",
        ),
        None,
    )
    .unwrap();
    assert_eq!(c.tls.ca_pem.as_deref(), Some(pki.ca_pem.as_bytes()));
    assert_eq!(c.tls.server_name.as_deref(), Some("api.local"));
    assert_eq!(c.proxy_url.unwrap().to_string(), "http://proxy:3128/");
}

#[test]
fn credentials_are_not_applied_to_plain_http() {
    let c = Config::from_kubeconfig_yaml(
        &kubeconfig("http://127.0.0.1:8080", "", "    token: abc\n"),
        None,
    )
    .unwrap();
    assert_eq!(c.auth, Auth::None);
}

#[test]
fn every_mistake_is_named() {
    let s = "https://127.0.0.1:6443";
    let e = err_of(&kubeconfig(
        s,
        "",
        "    client-certificate: /nonexistent/cert.pem\n    client-key: /nonexistent/key.pem\n",
    ));
    assert!(
        e.contains("users[\"u\"].client-certificate") && e.contains("/nonexistent/cert.pem"),
        "{e}"
    );

    let e = Config::from_kubeconfig_yaml(&kubeconfig(s, "", "    token: t\n"), Some("nope"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("context \"nope\" does not exist"), "{e}");

    let e = err_of(&kubeconfig(
        s,
        "    certificate-authority-data: '!!!notbase64'\n",
        "    token: t\n",
    ));
    assert!(
        e.contains("clusters[\"c\"].certificate-authority-data: invalid base64"),
        "{e}"
    );

    let e = err_of("clusters: [\n  - name: x\n  this is: : not yaml");
    assert!(e.contains("malformed YAML"), "{e}");

    let e = err_of(&kubeconfig(
        s,
        "",
        "    token: t\n    username: a\n    password: b\n",
    ));
    assert!(e.contains("more than one authentication method"), "{e}");

    let e = err_of(&kubeconfig(
        s,
        "    certificate-authority: /x/ca.crt\n    certificate-authority-data: eA==\n",
        "    token: t\n",
    ));
    assert!(
        e.contains("certificate-authority and certificate-authority-data are both specified"),
        "{e}"
    );

    let e = err_of(&kubeconfig(
        s,
        "",
        &format!("    client-certificate: {}\n", fixture("ec.crt").display()),
    ));
    assert!(
        e.contains("client-certificate is set but client-key is not"),
        "{e}"
    );

    let e = err_of(&kubeconfig(
        s,
        "    insecure-skip-tls-verify: true\n    certificate-authority-data: eA==\n",
        "    token: t\n",
    ));
    assert!(e.contains("insecure flag is not allowed"), "{e}");

    let e = err_of(&kubeconfig(
        s,
        "",
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: x\n",
    ));
    assert!(e.contains("exec.interactiveMode: required"), "{e}");

    let e = err_of(&kubeconfig(s, "", "    auth-provider:\n      name: gcp\n"));
    assert!(e.contains("auth-provider"), "{e}");

    let e = err_of(&kubeconfig("ftp://x", "", "    token: t\n"));
    assert!(e.contains("https:// or http://"), "{e}");

    let e = err_of(
        "apiVersion: v1\nkind: Config\ncontexts:\n- name: a\n  context: {cluster: nocluster, user: nouser}\ncurrent-context: a\n",
    );
    assert!(
        e.contains("cluster \"nocluster\", which does not exist"),
        "{e}"
    );
    assert!(e.contains("user \"nouser\", which does not exist"), "{e}");

    let e = err_of("apiVersion: v1\nkind: Config\n");
    assert!(e.contains("current-context is not set"), "{e}");

    // Several problems are reported together.
    let e = err_of(&kubeconfig(
        s,
        "    certificate-authority-data: '%%%'\n",
        "    client-key-data: '%%%'\n",
    ));
    assert!(e.starts_with("configuration: invalid configuration"), "{e}");
    assert!(
        e.contains("certificate-authority-data") && e.contains("client-key-data"),
        "{e}"
    );
}

#[test]
fn relative_paths_resolve_against_the_kubeconfig_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("ec.crt"), dir.path().join("user.crt")).unwrap();
    std::fs::copy(fixture("ec-sec1.key"), dir.path().join("user.key")).unwrap();
    let path = dir.path().join("config");
    std::fs::write(
        &path,
        kubeconfig(
            "https://127.0.0.1:6443",
            "",
            "    client-certificate: user.crt\n    client-key: user.key\n",
        ),
    )
    .unwrap();
    let c = Config::infer_with(
        &ConfigOptions {
            kubeconfig: Some(path),
            ..Default::default()
        },
        &|_| None,
        dir.path(),
    )
    .unwrap();
    assert!(c.tls.client_cert_pem.is_some() && c.tls.client_key_pem.is_some());
}

#[test]
fn loading_rules_precedence_and_merge_order() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.yaml");
    std::fs::write(
        &a,
        "clusters:\n- name: shared\n  cluster: {server: 'https://a.example:6443'}\nusers:\n- name: u\n  user: {token: from-a}\ncontexts:\n- name: ctx-a\n  context: {cluster: shared, user: u, namespace: na}\n",
    )
    .unwrap();
    std::fs::write(
        &b,
        "current-context: ctx-b\nclusters:\n- name: shared\n  cluster: {server: 'https://b.example:6443'}\n- name: only-b\n  cluster: {server: 'https://onlyb.example:6443'}\nusers:\n- name: u\n  user: {token: from-b, username: ignored}\ncontexts:\n- name: ctx-b\n  context: {cluster: only-b, user: u}\n- name: ctx-shared\n  context: {cluster: shared, user: u}\n",
    )
    .unwrap();
    let missing = dir.path().join("missing.yaml");
    let list = format!("{}:{}:{}", missing.display(), a.display(), b.display());
    let env = |k: &str| match k {
        "KUBECONFIG" => Some(list.clone()),
        "HOME" => Some("/nonexistent-home".into()),
        _ => None,
    };
    let none = ConfigOptions::default();
    // current-context comes from b (a sets none); user "u" from a, whole: b's "u" (token and
    // username, invalid on its own) is ignored entirely.
    let c = Config::infer_with(&none, &env, dir.path()).unwrap();
    assert_eq!(c.server.to_string(), "https://onlyb.example:6443/");
    assert_eq!(
        c.auth,
        Auth::Bearer {
            token: Some(Secret::new("from-a")),
            file: None
        }
    );
    // cluster "shared" from a.
    let c = Config::infer_with(
        &ConfigOptions {
            context: Some("ctx-shared".into()),
            ..Default::default()
        },
        &env,
        dir.path(),
    )
    .unwrap();
    assert_eq!(c.server.to_string(), "https://a.example:6443/");

    // An explicit kubeconfig replaces the list; --master overrides its server.
    let c = Config::infer_with(
        &ConfigOptions {
            kubeconfig: Some(a.clone()),
            context: Some("ctx-a".into()),
            master: Some("https://override.example:443".into()),
        },
        &env,
        dir.path(),
    )
    .unwrap();
    assert_eq!(c.server.to_string(), "https://override.example:443/");
    assert_eq!(c.default_namespace, "na");
    // A missing explicit file is an error naming it.
    let e = Config::infer_with(
        &ConfigOptions {
            kubeconfig: Some(missing.clone()),
            ..Default::default()
        },
        &env,
        dir.path(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("missing.yaml"), "{e}");
    // --master alone: that URL, nothing read.
    let c = Config::infer_with(
        &ConfigOptions {
            master: Some("http://127.0.0.1:8080".into()),
            ..Default::default()
        },
        &env,
        dir.path(),
    )
    .unwrap();
    assert_eq!(c.server.to_string(), "http://127.0.0.1:8080/");
    assert_eq!(c.auth, Auth::None);

    // Without KUBECONFIG: ~/.kube/config.
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".kube")).unwrap();
    std::fs::write(
        home.join(".kube/config"),
        kubeconfig("https://home.example:6443", "", "    token: home\n"),
    )
    .unwrap();
    let home_s = home.display().to_string();
    let env_home = |k: &str| (k == "HOME").then(|| home_s.clone());
    let c = Config::infer_with(&none, &env_home, dir.path()).unwrap();
    assert_eq!(c.server.to_string(), "https://home.example:6443/");

    // Nothing at all: in-cluster is tried and its failure explained.
    let e = Config::infer_with(&none, &|_| None, dir.path())
        .unwrap_err()
        .to_string();
    assert!(e.contains("KUBERNETES_SERVICE_HOST"), "{e}");
}

#[test]
fn in_cluster_from_a_directory_and_env() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki();
    std::fs::write(dir.path().join("token"), "sa-token\n").unwrap();
    std::fs::write(dir.path().join("ca.crt"), &pki.ca_pem).unwrap();
    std::fs::write(dir.path().join("namespace"), " operators \n").unwrap();
    let env = |k: &str| match k {
        "KUBERNETES_SERVICE_HOST" => Some("10.96.0.1".to_string()),
        "KUBERNETES_SERVICE_PORT" => Some("443".to_string()),
        _ => None,
    };
    let c = Config::in_cluster_from(dir.path(), &env).unwrap();
    assert_eq!(c.server.to_string(), "https://10.96.0.1:443/");
    assert_eq!(c.default_namespace, "operators");
    assert_eq!(c.tls.ca_pem.as_deref(), Some(pki.ca_pem.as_bytes()));
    assert_eq!(
        c.auth,
        Auth::Bearer {
            token: Some(Secret::new("sa-token")),
            file: Some(dir.path().join("token"))
        }
    );
    let env6 = |k: &str| match k {
        "KUBERNETES_SERVICE_HOST" => Some("fd00::1".to_string()),
        "KUBERNETES_SERVICE_PORT" => Some("6443".to_string()),
        "POD_NAMESPACE" => Some("from-env".to_string()),
        _ => None,
    };
    let c = Config::in_cluster_from(dir.path(), &env6).unwrap();
    assert_eq!(c.server.to_string(), "https://[fd00::1]:6443/");
    assert_eq!(c.default_namespace, "from-env");

    let e = Config::in_cluster_from(dir.path(), &|k| {
        (k == "KUBERNETES_SERVICE_HOST").then(|| "h".into())
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("KUBERNETES_SERVICE_PORT must be defined"), "{e}");
    let empty = tempfile::tempdir().unwrap();
    let e = Config::in_cluster_from(empty.path(), &env)
        .unwrap_err()
        .to_string();
    assert!(e.contains("token"), "{e}");
}

/// A server that accepts only `Bearer <expected>` and logs what it got.
async fn token_server(expected: Arc<std::sync::Mutex<String>>) -> TestServer {
    serve_http(Arc::new(move |r: &Logged| {
        let want = format!("Bearer {}", expected.lock().unwrap());
        if r.header("authorization") == Some(want.as_str()) {
            json(
                200,
                json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}),
            )
        } else {
            status(401, "Unauthorized", "Unauthorized")
        }
    }))
    .await
}

#[tokio::test(start_paused = true)]
async fn token_file_is_reread_about_every_minute() {
    let dir = tempfile::tempdir().unwrap();
    let tf = dir.path().join("token");
    std::fs::write(&tf, "one").unwrap();
    let expected = Arc::new(std::sync::Mutex::new("one".to_string()));
    let server = token_server(expected.clone()).await;
    let mut cfg = server.config();
    cfg.qps = 0.0;
    cfg.timeout = None;
    cfg.auth = Auth::Bearer {
        token: None,
        file: Some(tf.clone()),
    };
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    pods.get("a").await.unwrap();
    // Rotate; the cached token is still used for a while.
    std::fs::write(&tf, "two").unwrap();
    pods.get("a").await.unwrap();
    *expected.lock().unwrap() = "two".into();
    tokio::time::advance(Duration::from_secs(61)).await;
    pods.get("a").await.unwrap();
    let auths: Vec<_> = server
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap().to_string())
        .collect();
    assert_eq!(auths, ["Bearer one", "Bearer one", "Bearer two"]);
}

#[tokio::test]
async fn token_file_is_reread_after_401() {
    let dir = tempfile::tempdir().unwrap();
    let tf = dir.path().join("token");
    std::fs::write(&tf, "one").unwrap();
    let expected = Arc::new(std::sync::Mutex::new("one".to_string()));
    let server = token_server(expected.clone()).await;
    let mut cfg = server.config();
    cfg.qps = 0.0;
    cfg.auth = Auth::Bearer {
        token: None,
        file: Some(tf.clone()),
    };
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    pods.get("a").await.unwrap();
    std::fs::write(&tf, "two").unwrap();
    *expected.lock().unwrap() = "two".into();
    pods.get("a").await.unwrap();
    assert_eq!(
        server.requests().len(),
        3,
        "401, then one retry with the new token"
    );
}

#[cfg(unix)]
fn write_plugin(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("plugin.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[cfg(unix)]
#[tokio::test]
async fn exec_plugin_is_cached_and_refreshed_after_401() {
    let dir = tempfile::tempdir().unwrap();
    // Each run prints tok-<n>, n counting the runs; it records KUBERNETES_EXEC_INFO.
    write_plugin(
        dir.path(),
        r#"echo run >> "$COUNT"
n=$(wc -l < "$COUNT" | tr -d ' ')
printf '%s' "$KUBERNETES_EXEC_INFO" > "$INFO"
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"tok-%s","expirationTimestamp":"2999-01-01T00:00:00Z"}}' "$n"
"#,
    );
    let expected = Arc::new(std::sync::Mutex::new("tok-1".to_string()));
    let server = token_server(expected.clone()).await;
    let count = dir.path().join("count");
    let info = dir.path().join("info");
    let kc_path = dir.path().join("kubeconfig");
    // The server is http; use an https kubeconfig to get the credentials, then point the
    // built config at the test server.
    std::fs::write(
        &kc_path,
        kubeconfig(
            "https://127.0.0.1:1",
            "",
            &format!(
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: ./plugin.sh\n      interactiveMode: Never\n      provideClusterInfo: true\n      env:\n      - {{name: COUNT, value: '{}'}}\n      - {{name: INFO, value: '{}'}}\n",
                count.display(),
                info.display()
            ),
        ),
    )
    .unwrap();
    let mut cfg = Config::infer_with(
        &ConfigOptions {
            kubeconfig: Some(kc_path),
            ..Default::default()
        },
        &|_| None,
        dir.path(),
    )
    .unwrap();
    cfg.server = server.url().parse().unwrap();
    cfg.qps = 0.0;
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    pods.get("a").await.unwrap();
    pods.get("a").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(&count).unwrap().lines().count(),
        1,
        "cached until expiry"
    );
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&info).unwrap()).unwrap();
    assert_eq!(info["kind"], "ExecCredential");
    assert_eq!(info["apiVersion"], "client.authentication.k8s.io/v1");
    assert_eq!(info["spec"]["interactive"], false);
    assert_eq!(
        info["spec"]["cluster"]["server"],
        format!("{}/", server.url())
    );

    // The server revokes tok-1: one 401, the plugin runs again, the retry succeeds.
    *expected.lock().unwrap() = "tok-2".into();
    pods.get("a").await.unwrap();
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 2);
    let codes: Vec<_> = server
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap().to_string())
        .collect();
    assert_eq!(
        codes,
        [
            "Bearer tok-1",
            "Bearer tok-1",
            "Bearer tok-1",
            "Bearer tok-2"
        ]
    );
}

#[cfg(unix)]
#[tokio::test]
async fn exec_plugin_failures_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = write_plugin(
        dir.path(),
        "echo 'error: you must log in first' >&2\nexit 3\n",
    );
    let server = serve_http(Arc::new(|_r: &Logged| {
        status(500, "InternalError", "unreachable")
    }))
    .await;
    let exec = |command: String, hint: Option<&str>| sample_client_go::client::config::ExecConfig {
        api_version: "client.authentication.k8s.io/v1".into(),
        command,
        args: vec![],
        env: vec![],
        install_hint: hint.map(str::to_owned),
        interactive_mode: InteractiveMode::Never,
        provide_cluster_info: false,
    };
    let mut cfg = server.config();
    cfg.auth = Auth::Exec(exec(plugin.display().to_string(), None));
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    let e = pods.get("a").await.unwrap_err().to_string();
    assert!(
        e.contains("you must log in first") && e.contains("exit status: 3"),
        "{e}"
    );

    let mut cfg = server.config();
    cfg.auth = Auth::Exec(exec(
        dir.path().join("no-such-plugin").display().to_string(),
        Some("install it with: brew install no-such-plugin"),
    ));
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    let e = pods.get("a").await.unwrap_err().to_string();
    assert!(
        e.contains("not found") && e.contains("brew install no-such-plugin"),
        "{e}"
    );

    let mut cfg = server.config();
    let mut always = exec(plugin.display().to_string(), None);
    always.interactive_mode = InteractiveMode::Always;
    cfg.auth = Auth::Exec(always);
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        let e = pods.get("a").await.unwrap_err().to_string();
        assert!(e.contains("interactiveMode is Always"), "{e}");
    }
    assert!(
        server.requests().is_empty(),
        "no request goes out without credentials"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn exec_plugin_can_supply_a_client_certificate() {
    let server = serve_https(Arc::new(|r: &Logged| {
        if r.client_cert {
            json(
                200,
                json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}),
            )
        } else {
            status(401, "Unauthorized", "no client certificate")
        }
    }))
    .await;
    let pki = server.pki.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cred = dir.path().join("cred.json");
    std::fs::write(
        &cred,
        json!({"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential",
               "status":{"clientCertificateData": pki.client_cert_pem, "clientKeyData": pki.client_key_pem}})
        .to_string(),
    )
    .unwrap();
    let plugin = write_plugin(dir.path(), &format!("cat '{}'\n", cred.display()));
    let mut cfg = server.config();
    cfg.qps = 0.0;
    cfg.auth = Auth::Exec(sample_client_go::client::config::ExecConfig {
        api_version: "client.authentication.k8s.io/v1beta1".into(),
        command: plugin.display().to_string(),
        args: vec![],
        env: vec![],
        install_hint: None,
        interactive_mode: InteractiveMode::Never,
        provide_cluster_info: false,
    });
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    pods.get("a").await.unwrap();
    pods.get("a").await.unwrap();
    let log = server.requests();
    assert_eq!(log.len(), 2);
    assert!(
        log.iter()
            .all(|r| r.client_cert && r.header("authorization").is_none())
    );
}

#[cfg(unix)]
#[tokio::test]
async fn expired_exec_credentials_are_fetched_again() {
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    let plugin = write_plugin(
        dir.path(),
        &format!(
            "echo run >> '{}'\nprintf '%s' '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"t\",\"expirationTimestamp\":\"2000-01-01T00:00:00Z\"}}}}'\n",
            count.display()
        ),
    );
    let expected = Arc::new(std::sync::Mutex::new("t".to_string()));
    let server = token_server(expected).await;
    let mut cfg = server.config();
    cfg.qps = 0.0;
    cfg.auth = Auth::Exec(sample_client_go::client::config::ExecConfig {
        api_version: "client.authentication.k8s.io/v1".into(),
        command: plugin.display().to_string(),
        args: vec![],
        env: vec![],
        install_hint: None,
        interactive_mode: InteractiveMode::Never,
        provide_cluster_info: false,
    });
    let pods: Api<Pod> = Api::namespaced(Client::new(cfg).unwrap(), "ns");
    pods.get("a").await.unwrap();
    pods.get("a").await.unwrap();
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 2);
}

#[test]
fn with_nothing_to_load_the_error_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let nothing = |_: &str| None::<String>;
    let e = Config::infer_with(&ConfigOptions::default(), &nothing, dir.path())
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "configuration: no kubeconfig found (no --kubeconfig, KUBECONFIG or ~/.kube/config) and \
         unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and \
         KUBERNETES_SERVICE_PORT must be defined"
    );
}
