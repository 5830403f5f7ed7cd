//! Parses arbitrary text as a kubeconfig and builds a client config from it: errors are fine,
//! panics are not. File references are cleared before building so the target reads no files.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use sample_client_go::client::config::Kubeconfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut kc) = Kubeconfig::parse(text, "fuzz", Path::new("/nonexistent")) else {
        return;
    };
    for c in &mut kc.clusters {
        c.cluster.certificate_authority = None;
    }
    for u in &mut kc.users {
        u.user.client_certificate = None;
        u.user.client_key = None;
        u.user.token_file = None;
    }
    let names: Vec<String> = kc.contexts.iter().map(|c| c.name.clone()).collect();
    let _ = kc.to_config(None, None);
    for name in names.iter().take(4) {
        let _ = kc.to_config(Some(name), Some("https://127.0.0.1:6443"));
    }
});
