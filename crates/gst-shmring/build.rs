fn main() {
    gst_plugin_version_helper::info();
    // The plugin's origin: the workspace's `repository`, or what GStreamer's own
    // builds say when they have none (GStreamer refuses a plugin with no origin).
    let repository = std::env::var("CARGO_PKG_REPOSITORY").unwrap_or_default();
    let origin = if repository.is_empty() {
        "Unknown package origin".to_string()
    } else {
        repository
    };
    println!("cargo:rustc-env=PLUGIN_ORIGIN={origin}");
}
