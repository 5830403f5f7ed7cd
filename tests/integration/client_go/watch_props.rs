//! Property: the watch decoder's output depends only on the bytes, never on how the network cut
//! them into chunks; and it never holds more than one bounded line.

use k8s_openapi::api::core::v1::ConfigMap;
use proptest::prelude::*;
use sample_client_go::client::WatchDecoder;

const LIMIT: usize = 256;

fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (prop::sample::select(vec!["ADDED", "MODIFIED", "DELETED"]), "[a-z]{1,12}", 1u32..10_000)
            .prop_map(|(t, name, rv)| format!(
                r#"{{"type":"{t}","object":{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","resourceVersion":"{rv}"}},"data":{{"k":"v é\n"}}}}}}"#
            )),
        1 => (1u32..10_000, any::<bool>()).prop_map(|(rv, end)| format!(
            r#"{{"type":"BOOKMARK","object":{{"metadata":{{"resourceVersion":"{rv}","annotations":{{"k8s.io/initial-events-end":"{end}"}}}}}}}}"#
        )),
        1 => Just(r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410,"message":"too old"}}"#.to_string()),
        1 => Just(r#"{"type":"SURPRISE","object":{}}"#.to_string()),
        1 => Just(String::new()),
        1 => "[ -~]{0,40}",
        1 => (LIMIT + 1..LIMIT * 3).prop_map(|n| "x".repeat(n)),
    ]
}

fn decode_with_cuts(bytes: &[u8], cuts: &[usize]) -> Vec<String> {
    let mut d = WatchDecoder::<ConfigMap>::with_max_line(LIMIT);
    let mut out = Vec::new();
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut prev = 0;
    for c in cuts.into_iter().chain(std::iter::once(bytes.len())) {
        out.extend(d.push(&bytes[prev..c]));
        assert!(
            d.buffered() <= LIMIT,
            "decoder holds {} bytes",
            d.buffered()
        );
        prev = c;
    }
    out.extend(d.finish());
    out.into_iter().map(|e| format!("{e:?}")).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn chunking_never_changes_the_events(
        lines in prop::collection::vec(line(), 0..20),
        cuts in prop::collection::vec(any::<usize>(), 0..40),
        trailing_newline in any::<bool>(),
    ) {
        let mut body = lines.join("\n");
        if trailing_newline {
            body.push('\n');
        }
        let bytes = body.as_bytes();
        let whole = decode_with_cuts(bytes, &[]);
        let cut = decode_with_cuts(bytes, &cuts);
        prop_assert_eq!(&whole, &cut);
        // Byte at a time is the most extreme chunking.
        let every: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(&whole, &decode_with_cuts(bytes, &every));
        // One result per non-blank line, in order.
        let non_blank = lines.iter().filter(|l| !l.trim().is_empty()).count();
        prop_assert_eq!(whole.len(), non_blank);
    }
}
