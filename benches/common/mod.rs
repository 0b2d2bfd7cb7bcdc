//! Shared by the criterion benches.

/// The runtime every bench drives Strata's async API with: two workers, as on the CI machine.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}
