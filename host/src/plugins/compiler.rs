//! Compiling a component in a child process, so the server never holds the compiler.
//!
//! Compiling touches the compiler's code (about 13 MiB of the binary's pages) and
//! leaves its working memory in the allocator's per-thread arenas (about 21 MiB more).
//! A server that compiled its plugins at start therefore sat at about 75 MiB for as
//! long as it ran, against 40 MiB for one that loaded them from the compiled-plugin
//! cache: every first start after an install or an upgrade. The `hookhost` binary
//! instead runs itself (`hookhost __compile-plugin`) for each component to compile.
//! A built-in is named by its SHA-256 and compiled from the child's own copy, so the
//! server does not read (and keep resident) the embedded bytes either; any other
//! component goes to the child's stdin. The compiled code comes back on stdout, and
//! the child's memory goes with it. The child compiles only for an engine whose
//! compatibility key is the parent's, so what it returns always loads.
//!
//! Only the `hookhost` binary turns this on ([`compile_in_child_processes`]); a
//! library user (the tests, the bench) compiles in its own process, as does the binary
//! once a child could not run.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The hidden subcommand the child runs.
pub const COMMAND: &str = "__compile-plugin";
/// The child's argument naming the parent's engine (its compatibility key).
const ENGINE_FLAG: &str = "--engine";
/// The child's argument naming a built-in by its SHA-256.
const BUILTIN_FLAG: &str = "--builtin";
/// The child's exit status when the component does not compile (stdout: why). Not 1
/// (the child's own failures) nor 2 (a command line it does not take).
const REFUSED: u8 = 3;
/// The exit status of a Rust program that panicked.
const PANICKED: i32 = 101;

static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
/// Set when a child could not run: every later compilation happens in this process.
static GAVE_UP: AtomicBool = AtomicBool::new(false);

/// Compile plugins in a child process running this very executable from now on.
pub fn compile_in_child_processes() {
    // `/proc/self/exe` is the running image even after an upgrade has replaced or
    // removed the file, so the child's compiled code always matches this engine.
    let program = if cfg!(target_os = "linux") {
        Some(PathBuf::from("/proc/self/exe"))
    } else {
        std::env::current_exe().ok()
    };
    if let Some(program) = program {
        let _ = PROGRAM.set(program);
    }
}

/// The component to compile.
pub(super) enum Source<'a> {
    /// A built-in: the child finds it in its own image by its SHA-256.
    Builtin {
        digest: &'a [u8; 32],
        embedded: &'static [u8],
    },
    /// Any other component, written to the child's stdin.
    Bytes(&'a [u8]),
}

impl Source<'_> {
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Source::Builtin { embedded, .. } => embedded,
            Source::Bytes(bytes) => bytes,
        }
    }
}

/// What a child made of a component.
pub(super) enum Compiled {
    /// `Engine::precompile_component`'s output.
    Code(Vec<u8>),
    /// The component does not compile; the child's message.
    Refused(String),
    /// No child process (not turned on, or it could not run): compile here.
    Unavailable,
}

/// Compile `source` in a child process.
pub(super) fn in_child(source: &Source<'_>) -> Compiled {
    let Some(program) = PROGRAM.get() else {
        return Compiled::Unavailable;
    };
    if GAVE_UP.load(Ordering::Relaxed) {
        return Compiled::Unavailable;
    }
    match run_child(program, source) {
        Ok(compiled) => {
            if let Compiled::Code(code) = &compiled {
                tracing::debug!(bytes = code.len(), "plugin compiled in a child process");
            }
            compiled
        }
        Err(error) => {
            // What failed once (the program, the engine) fails again: say so once.
            if !GAVE_UP.swap(true, Ordering::Relaxed) {
                tracing::warn!(%error, "cannot compile plugins in a child process; compiling them in this one");
            }
            Compiled::Unavailable
        }
    }
}

fn run_child(program: &PathBuf, source: &Source<'_>) -> std::io::Result<Compiled> {
    let mut command = Command::new(program);
    command
        .arg(COMMAND)
        .arg(ENGINE_FLAG)
        .arg(super::runtime::engine_key())
        // What the child would log at start (the instance pool refused, say) this
        // process has logged already; its failures come back as its answer.
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    match source {
        Source::Builtin { digest, .. } => {
            command.arg(BUILTIN_FLAG).arg(hex::encode(digest));
            command.stdin(Stdio::null());
        }
        Source::Bytes(_) => {
            command.stdin(Stdio::piped());
        }
    }
    let mut child = command.spawn()?;
    if let (Source::Bytes(bytes), Some(mut stdin)) = (source, child.stdin.take()) {
        // The child reads all of stdin before it writes; one that stopped early says
        // why through its exit status, read below.
        match stdin.write_all(bytes) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other?,
        }
    }
    let output = child.wait_with_output()?;
    answer(output.status, output.stdout)
}

/// What a child's exit says: its code, its refusal, or that it crashed on this very
/// component (a panic, or killed by a signal). A crash refuses the component, since
/// compiling it in this process would crash the server as well. Any other status
/// says the child could not do the job at all (the program would not run as this
/// command, or not for this engine), and this process compiles instead.
fn answer(status: std::process::ExitStatus, stdout: Vec<u8>) -> std::io::Result<Compiled> {
    match status.code() {
        Some(0) => Ok(Compiled::Code(stdout)),
        Some(code) if code == i32::from(REFUSED) => Ok(Compiled::Refused(
            String::from_utf8_lossy(&stdout).into_owned(),
        )),
        Some(PANICKED) | None => Ok(Compiled::Refused(format!(
            "the compiler failed on it: the compiling process ended with {status}"
        ))),
        Some(_) => Err(std::io::Error::other(format!(
            "the child process ended with {status}"
        ))),
    }
}

/// The child: compile the built-in whose SHA-256 is `builtin`, or else the component
/// on stdin, and write the compiled code to stdout, or why it does not compile (exit
/// status 3). It refuses to compile unless its engine's key is `engine`, the parent's.
pub fn child_main(engine: &str, builtin: Option<&str>) -> ExitCode {
    // Its engine can differ from the parent's where the instance pool is refused in
    // one process and not the other: its code would not load there.
    if engine != super::runtime::engine_key() {
        eprintln!(
            "hookhost {COMMAND}: this engine ({}) is not the one asked for ({engine})",
            super::runtime::engine_key()
        );
        return ExitCode::FAILURE;
    }
    let mut read = Vec::new();
    let bytes = match builtin {
        Some(digest) => {
            let mut sha256 = [0u8; 32];
            let embedded = hex::decode_to_slice(digest, &mut sha256)
                .ok()
                .and_then(|()| super::builtin::with_digest(&sha256));
            let Some(embedded) = embedded else {
                eprintln!("hookhost {COMMAND}: no built-in plugin has the SHA-256 {digest}");
                return ExitCode::FAILURE;
            };
            embedded
        }
        None => {
            if let Err(error) = std::io::stdin().lock().read_to_end(&mut read) {
                eprintln!("hookhost {COMMAND}: cannot read the component from stdin: {error}");
                return ExitCode::FAILURE;
            }
            &read
        }
    };
    let (written, status) = match super::runtime::precompile_here(bytes) {
        Ok(compiled) => (
            std::io::stdout().lock().write_all(&compiled),
            ExitCode::SUCCESS,
        ),
        Err(error) => (
            std::io::stdout()
                .lock()
                .write_all(error.to_string().as_bytes()),
            ExitCode::from(REFUSED),
        ),
    };
    match written.and_then(|()| std::io::stdout().lock().flush()) {
        Ok(()) => status,
        Err(error) => {
            eprintln!("hookhost {COMMAND}: cannot write to stdout: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt as _;

    /// How an exit status reads on Unix: the code in the second byte, or the signal.
    fn exited(code: i32) -> std::process::ExitStatus {
        std::process::ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn a_child_that_crashes_refuses_its_component_and_one_that_cannot_run_does_not() {
        let code = answer(exited(0), b"code".to_vec()).expect("answer");
        assert!(matches!(code, Compiled::Code(c) if c == b"code"));
        let refused = answer(exited(3), b"not a component".to_vec()).expect("answer");
        assert!(matches!(refused, Compiled::Refused(why) if why == "not a component"));
        // The child's own failures (1) and a command line it does not take (2): this
        // process compiles instead.
        for code in [1, 2] {
            assert!(answer(exited(code), Vec::new()).is_err(), "{code}");
        }
        // A panic (101) or a signal: the compiler crashed on this component.
        for status in [exited(101), std::process::ExitStatus::from_raw(9)] {
            match answer(status, Vec::new()).expect("answer") {
                Compiled::Refused(why) => assert!(
                    why.starts_with("the compiler failed on it: the compiling process ended with"),
                    "{why}"
                ),
                _ => panic!("{status}: not refused"),
            }
        }
    }
}
