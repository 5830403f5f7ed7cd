//! The `hack/` scripts that restate a value of the code, checked against it.

use std::path::Path;

/// Under valgrind the API server cannot execute itself again with its malloc tunables
/// (`apimachinery::malloc::tune_for_server`), so `hack/profile-apiserver.sh` sets them itself:
/// they must be the server's own, or the profile measures another allocator setting.
#[test]
fn profile_apiserver_sets_the_servers_own_malloc_tunables() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/profile-apiserver.sh");
    let script = std::fs::read_to_string(&path).expect("read hack/profile-apiserver.sh");
    let wanted = format!("GLIBC_TUNABLES={} ", apimachinery::malloc::SERVER_TUNABLES);
    assert!(
        script.contains(&wanted),
        "{} does not set {wanted:?}",
        path.display()
    );
}
