//! Feeds arbitrary bytes, cut at arbitrary points, to the watch decoder: it must never panic,
//! never buffer more than its line bound, and produce the same events however the bytes are cut.
#![no_main]

use k8s_openapi::api::core::v1::ConfigMap;
use libfuzzer_sys::fuzz_target;
use sample_client_go::client::WatchDecoder;

const LIMIT: usize = 4096;

fuzz_target!(|data: &[u8]| {
    // The first byte picks a chunk size, the rest is the body.
    let Some((&step, body)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1);
    let mut whole = WatchDecoder::<ConfigMap>::with_max_line(LIMIT);
    let mut expected: Vec<String> = whole.push(body).iter().map(|e| format!("{e:?}")).collect();
    expected.extend(whole.finish().map(|e| format!("{e:?}")));

    let mut chunked = WatchDecoder::<ConfigMap>::with_max_line(LIMIT);
    let mut got = Vec::new();
    for chunk in body.chunks(step) {
        got.extend(chunked.push(chunk).iter().map(|e| format!("{e:?}")));
        assert!(chunked.buffered() <= LIMIT);
    }
    got.extend(chunked.finish().map(|e| format!("{e:?}")));
    assert_eq!(expected, got);
});
