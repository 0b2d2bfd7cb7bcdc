//! Scheduling priority of Strata's background threads that only save their callers time later.
//!
//! A thread such as the prefaulter works ahead of the writers: nothing waits for it, and if it
//! falls behind the writers do its work themselves. At the default priority it competed with
//! the threads it serves: on 2 CPUs the prefault thread woke, preempted a group command's
//! thread on its CPU and kept it waiting 2.5-4.3 ms (the command runnable, the other CPU idle)
//! while it populated pages (perf sched_switch, fresh-store `append_batch` commands). Such a
//! thread lowers its own priority ([`lower_current_thread`]), so it runs in the time its
//! callers leave over.

/// Nice value of a thread whose work only saves time later (the lowest priority, 19).
pub(crate) const AHEAD_OF_CALLERS: i32 = 19;

/// Lowers the calling thread's scheduling priority to `nice` (-20..=19; larger yields more);
/// a refusal only costs speed, so it is logged, not returned.
pub(crate) fn lower_current_thread(nice: i32) {
    debug_assert!((-20..=19).contains(&nice));
    #[cfg(target_os = "linux")]
    {
        // On Linux the priority of a thread id is that thread's alone.
        let tid = rustix::thread::gettid();
        if let Err(e) = rustix::process::setpriority_process(Some(tid), nice) {
            tracing::debug!(error = %e, nice, "a background thread kept its priority");
        }
    }
}
