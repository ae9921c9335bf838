//! Gives the shared library the soname it is installed under.
fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libshmring.so.{major}");
    println!("cargo:rerun-if-changed=build.rs");
}
