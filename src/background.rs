//! Scheduling priority of Strata's background threads that only save their callers time later.
//!
//! A thread such as the prefaulter works ahead of the writers: nothing waits for it, and if it
//! falls behind the writers do its work themselves. At the default priority it competed with
//! the threads it serves as an equal: on 2 CPUs perf sched_switch showed the prefault thread
//! preempting a group command's thread. Such a thread lowers its own priority
//! ([`lower_current_thread`]), so it runs in the time its callers leave over. (On a kernel
//! without preemption, as this machine's (`preempt=none`), no priority preempts a thread inside
//! a long system call or fault: a command that wakes on the prefaulter's CPU still waits for the
//! fault's next reschedule point; the idle scheduling class measured no better.)

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
