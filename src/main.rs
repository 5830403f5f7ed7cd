//! The `sample-controller` binary.
fn main() {
    sample_controller::install_crypto_provider();
    println!("sample-controller {}", env!("CARGO_PKG_VERSION"));
}
