//! End-to-end tests: real HTTP over loopback, real SQLite files, real plugins compiled
//! from source by `host/build.rs`, and the real `hookhost` binary for the CLI.

mod cli;
mod cluster;
mod contract;
mod crash;
mod delivery;
mod forensics;
mod handshakes;
mod ingest;
mod operations;
mod postgres;
mod reconcile;
mod sandbox;
mod schemes;
mod support;
mod tenancy;
