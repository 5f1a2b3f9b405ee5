//! Builds every provider plugin (`plugins/*`) and test guest (`tests/guests/*`) from
//! source to a `wasm32-wasip2` component, the way wasmtime's test-programs artifacts
//! are built: one nested `cargo build` into a separate target directory, rerun when
//! any source file listed in the guests' dep-info changes. Plugins are embedded as
//! built-ins; a plugin without `fixtures/vectors/<name>.json` fails the build.

use sha2::{Digest as _, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::{env, fs};

const TARGET: &str = "wasm32-wasip2";
/// Shadow-stack size of every guest, bytes.
const GUEST_STACK: u32 = 16 * 1024;

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest
        .parent()
        .expect("host/ lives in the workspace")
        .to_path_buf();
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/hookhost-<hash>/out: guests get <target>/wasm-guests.
    let target_dir = out
        .ancestors()
        .nth(4)
        .expect("OUT_DIR depth")
        .join("wasm-guests");

    let mut plugins = crates_in(&root.join("plugins"));
    // Development: `HOOKHOST_ONLY_PLUGINS=stripe,github` embeds just these built-ins,
    // so a plugin someone is still writing does not hold up everyone else's build.
    println!("cargo:rerun-if-env-changed=HOOKHOST_ONLY_PLUGINS");
    if let Some(only) = env::var("HOOKHOST_ONLY_PLUGINS")
        .ok()
        .filter(|v| !v.is_empty())
    {
        let only: Vec<&str> = only.split(',').map(str::trim).collect();
        plugins.retain(|(name, _)| only.contains(&name.as_str()));
    }
    let guests = crates_in(&root.join("tests/guests"));
    // The stores' migrations are embedded by `sqlx::migrate!`, which does not tell
    // cargo about a migration added to its directory: this does.
    for dir in [
        root.join("plugins"),
        root.join("tests/guests"),
        root.join("wit"),
        manifest.join("migrations"),
    ] {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    for (name, _) in &plugins {
        let vectors = root.join("fixtures/vectors").join(format!("{name}.json"));
        println!("cargo:rerun-if-changed={}", vectors.display());
        if !vectors.is_file() {
            panic!(
                "plugin `{name}` has no signature vectors: add {} (format: docs/vectors.md)",
                vectors.display()
            );
        }
    }

    let mut cargo = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(&root)
        .args(["build", "--release", "--target", TARGET, "--target-dir"])
        .arg(&target_dir)
        // Guests are small and shipped inside the binary: no debug info, whole-program
        // optimisation (they are tiny, so it costs seconds).
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "false")
        .env("CARGO_PROFILE_RELEASE_LTO", "true")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        // A fresh instance per request pays for every page of memory it touches: its
        // reset zeroes or copies back the whole memory. The default 1 MiB shadow stack
        // would be most of it. Every built-in reads bodies nested 200,000 levels deep
        // with 8 KiB and traps with 2 KiB (`every_built_in_plugin_reads_deeply_…`),
        // so 16 KiB leaves twice the room they were seen to need, and keeps a
        // built-in's stack, data and the heap of a small request in one 64 KiB page
        // (32 KiB took two: 1.3 µs more per request to reset).
        .env(
            "CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS",
            format!("-Clink-arg=-zstack-size={GUEST_STACK}"),
        )
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET");
    for (_, package) in plugins.iter().chain(&guests) {
        cargo.args(["-p", package]);
    }
    let status = cargo.status().expect("run cargo for the wasm guests");
    if !status.success() {
        panic!(
            "building the wasm plugins failed (is the target installed? `rustup target add {TARGET}`)"
        );
    }

    let wasm_dir = target_dir.join(TARGET).join("release");
    let mut builtin = String::from(
        "/// Built-in plugins, one per `plugins/<name>` crate.\nconst BUILTIN: &[Builtin] = &[\n",
    );
    // Each component is embedded from a copy in OUT_DIR, written with its digest: the
    // shared guest target directory may be rebuilt by another build of this script
    // (clippy, a test build with other features) into different bytes, which must never
    // be embedded under this run's digest.
    let embedded = out.join("plugins");
    fs::create_dir_all(&embedded).expect("create OUT_DIR/plugins");
    for (name, package) in &plugins {
        let bytes = fs::read(artifact(&wasm_dir, package)).expect("read a built plugin");
        let copy = embedded.join(format!("{name}.wasm"));
        fs::write(&copy, &bytes).expect("copy a built plugin into OUT_DIR");
        builtin.push_str(&format!(
            "    Builtin {{ name: {name:?}, bytes: include_bytes!({:?}), sha256: {:?} }},\n",
            copy.display().to_string(),
            <[u8; 32]>::from(Sha256::digest(&bytes)),
        ));
    }
    builtin.push_str("];\n");
    fs::write(out.join("builtin.rs"), builtin).expect("write builtin.rs");
    for (_, package) in plugins.iter().chain(&guests) {
        artifact(&wasm_dir, package);
    }
    println!("cargo:rustc-env=HOOKHOST_GUESTS_DIR={}", wasm_dir.display());
}

/// `(directory name, package name)` for each crate directly under `dir`, sorted.
fn crates_in(dir: &Path) -> Vec<(String, String)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut crates: Vec<(String, String)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .map(|p| {
            let manifest = fs::read_to_string(p.join("Cargo.toml")).expect("read Cargo.toml");
            let package = manifest
                .lines()
                .find_map(|l| {
                    l.trim()
                        .strip_prefix("name = ")
                        .map(|v| v.trim_matches('"').to_string())
                })
                .expect("package name in Cargo.toml");
            let dir = p
                .file_name()
                .expect("dir name")
                .to_string_lossy()
                .into_owned();
            (dir, package)
        })
        .collect();
    crates.sort();
    crates
}

/// The component for `package`, with rerun-if-changed for every source it was built from.
fn artifact(wasm_dir: &Path, package: &str) -> PathBuf {
    let stem = package.replace('-', "_");
    let wasm = wasm_dir.join(format!("{stem}.wasm"));
    assert!(wasm.is_file(), "{} was not built", wasm.display());
    if let Ok(dep_info) = fs::read_to_string(wasm_dir.join(format!("{stem}.d"))) {
        // `out: dep dep ...` lines; paths escape spaces with a backslash.
        for line in dep_info.lines() {
            let Some((_, deps)) = line.split_once(": ") else {
                continue;
            };
            for dep in deps
                .split(' ')
                .filter(|d| !d.is_empty() && !d.ends_with('\\'))
            {
                println!("cargo:rerun-if-changed={dep}");
            }
        }
    }
    wasm
}
