//! The `hookhost` command; everything lives in the library.

fn main() -> std::process::ExitCode {
    hookhost::cli::main()
}
