//! Helpers for the cross-language tests: building the C examples against the
//! library cargo just built, and child-process guards.
#![allow(dead_code)]

pub mod pattern;

use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory holding libshmring_ffi.so: the test binary's own `deps` directory.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory").to_path_buf();
    assert!(
        deps.join("libshmring_ffi.so").exists(),
        "libshmring_ffi.so not found in {} (cargo builds it with the tests)",
        deps.display()
    );
    deps
}

/// Compiles examples/c/NAME.c against the freshly built library (once per process).
pub fn c_example(name: &'static str) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<Vec<(String, PathBuf)>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap();
    if let Some((_, p)) = built.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("shmring-ffi-c");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join(name);
    let ws = workspace();
    // The library's soname is libshmring.so.0 (its installed name): point that name
    // at the freshly built libshmring_ffi.so.
    let lib = out_dir.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let soname = lib.join("libshmring.so.0");
    let _ = std::fs::remove_file(&soname);
    std::os::unix::fs::symlink(lib_dir().join("libshmring_ffi.so"), &soname).unwrap();
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-std=c11",
            "-D_GNU_SOURCE",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .arg(format!("-I{}", ws.join("include").display()))
        .arg(format!("-I{}", ws.join("examples/c").display()))
        .arg(ws.join(format!("examples/c/{name}.c")))
        .arg("-o")
        .arg(&out)
        .arg(soname.as_os_str())
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling examples/c/{name}.c failed");
    built.push((name.to_string(), out.clone()));
    out
}

/// Makes `fds[i]` descriptor number 3 + i in the child (the host kit's rule).
pub fn pass_fds(cmd: &mut Command, fds: &[BorrowedFd<'_>]) {
    let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
    shmring_host::place_fds(cmd, &raw, 3);
}
