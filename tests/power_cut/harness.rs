//! The power-cut harness: runs a workload on a [`FaultFs`], cuts the power at each of its sync,
//! rename and unlink points (and at random points), writes the crash images a power cut there
//! could leave (nothing unsynced kept, everything kept, and seeded random mixes of kept, lost,
//! older written versions, zeroed and torn pages and directory changes), and checks each image
//! against what the workload saw acknowledged. The same workloads run under a fault on the Nth
//! operation and a full disk, where the store must answer typed errors and keep working once
//! the fault is gone, and then lose the power; and with a background thread held before each of
//! its operations while the foreground goes on (interleavings), cut just after it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use strata::fs::{CrashMode, FaultFs, FaultPlan, OpKinds, Reservation, ThreadHold};

/// A directory standing for one machine's disk, with the fault layer over it.
pub struct Disk {
    _dir: tempfile::TempDir,
    /// The store's root.
    pub root: PathBuf,
    /// The layer every file operation goes through.
    pub fs: FaultFs,
}

/// A scratch directory in memory when the machine has one (crash points run by the hundred).
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let builder = tempfile::Builder::new().prefix("strata-power-cut-").clone();
    if shm.is_dir() {
        builder.tempdir_in(shm).expect("a scratch directory")
    } else {
        builder.tempdir().expect("a scratch directory")
    }
}

thread_local! {
    /// The bound on open files of the stores this thread's workloads open.
    static OPEN_FILES_BOUND: std::cell::Cell<usize> =
        const { std::cell::Cell::new(strata::fs::DEFAULT_MAX_OPEN_FILES) };
}

/// Runs `f` with the stores its workloads open (on this thread) bounded to `bound` open files,
/// so that their files close and open again as they go.
pub fn with_open_files_bound<T>(bound: usize, f: impl FnOnce() -> T) -> T {
    let before = OPEN_FILES_BOUND.with(|b| b.replace(bound));
    let out = f();
    OPEN_FILES_BOUND.with(|b| b.set(before));
    out
}

impl Disk {
    /// A fresh, empty disk.
    pub fn new() -> Self {
        let dir = scratch();
        let root = dir.path().join("disk");
        std::fs::create_dir(&root).expect("the disk root");
        let fs = FaultFs::new(&root).expect("the fault layer");
        Self {
            _dir: dir,
            root,
            fs,
        }
    }

    /// A disk holding `image` as it is (every byte durable), to check or to keep using.
    pub fn from_image(image: &Path) -> Self {
        let dir = scratch();
        let root = dir.path().join("disk");
        copy_dir(image, &root);
        let fs = FaultFs::new(&root).expect("the fault layer");
        Self {
            _dir: dir,
            root,
            fs,
        }
    }

    /// The store options that put this disk's layer under a store, with this thread's bound on
    /// open files ([`with_open_files_bound`]).
    pub fn options(&self) -> strata::StoreOptions {
        strata::StoreOptions::default()
            .with_fs(self.fs.shared())
            .with_max_open_files(OPEN_FILES_BOUND.with(std::cell::Cell::get))
    }

    /// True once the power is off.
    pub fn dead(&self) -> bool {
        self.fs.crashed().is_some()
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// How a run went, by the workload's own account.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Errors met before `between`.
    pub errors_before: usize,
    /// Errors met after `between`.
    pub errors_after: usize,
    /// Whether the final probe (one more write, retried once) succeeded.
    pub probe_ok: bool,
}

/// A write path under test.
pub trait Workload: Sync {
    /// What the workload saw acknowledged.
    type Acks: Default + std::fmt::Debug;
    /// Its name in reports.
    fn name(&self) -> &'static str;
    /// Opens the store on `disk` and drives the write path, recording every acknowledgement
    /// in `acks`. Calls `between` once half-way (a test may lift its fault there). Stops early
    /// once the power is off; otherwise goes on past errors.
    fn run(&self, disk: &Disk, acks: &mut Self::Acks, between: &dyn Fn());
    /// Checks the store in `root` (a crash image, or the disk after the run) against `acks`.
    fn check(&self, root: &Path, acks: &Self::Acks);
    /// How the run went.
    fn outcome(&self, acks: &Self::Acks) -> Outcome;
    /// The error messages the run met.
    fn messages(&self, _acks: &Self::Acks) -> Vec<String> {
        Vec::new()
    }
    /// Most errors one injected failure may cause (the requests sharing the failed round).
    fn errors_per_fault(&self) -> usize {
        8
    }
}

/// Whether `STRATA_POWER_CUT_LONG` asks for the long version.
fn long() -> bool {
    std::env::var("STRATA_POWER_CUT_LONG").is_ok_and(|v| v != "0")
}

/// How hard to look: `STRATA_POWER_CUT_LONG=1` explores with more random images per point.
pub fn random_images_per_point() -> u64 {
    if long() {
        16
    } else {
        3
    }
}

/// The foreground operation counts a held thread waits for: the given samples, or in the long
/// version every count from 0 to the largest sample.
fn others_to_explore(samples: &[u64]) -> Vec<u64> {
    match samples.iter().max() {
        Some(&most) if long() => (0..=most).collect(),
        _ => samples.to_vec(),
    }
}

/// A seed for the random images; `STRATA_POWER_CUT_SEED` replays a printed one.
pub fn base_seed() -> u64 {
    std::env::var("STRATA_POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_CAFE)
}

/// What an exploration covered.
#[derive(Debug, Default, Clone, Copy)]
pub struct Coverage {
    /// Crash points (operations the power was cut before).
    pub points: u64,
    /// Crash images checked.
    pub images: u64,
}

/// Runs `check` on an image, turning a failure into a panic that says how to replay it.
fn check_image<W: Workload>(w: &W, image: &Path, acks: &W::Acks, context: &str, seed: u64) {
    let outcome = catch_unwind(AssertUnwindSafe(|| w.check(image, acks)));
    if let Err(panic) = outcome {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!(
            "{}: {context}: {message}\nacknowledged: {acks:?}\n(replay with \
             STRATA_POWER_CUT_SEED={seed})",
            w.name(),
        );
    }
}

/// How the random crash images of a point are chosen.
#[derive(Debug, Clone, Copy)]
pub struct Images {
    /// The base seed ([`base_seed`] unless a regression case fixes one).
    pub seed: u64,
    /// Random images per crash point ([`random_images_per_point`] unless fixed).
    pub per_point: u64,
    /// Also the image in which each overwritten page holds its first overwritten version
    /// ([`CrashMode::Overwritten`]: an undo lost, the undone bytes kept).
    pub overwritten: bool,
}

impl Images {
    /// As the environment says (`STRATA_POWER_CUT_SEED`, `STRATA_POWER_CUT_LONG`).
    pub fn from_env() -> Self {
        Self {
            seed: base_seed(),
            per_point: random_images_per_point(),
            overwritten: false,
        }
    }

    /// One random image per point (as many as [`Self::from_env`] in the long version), for the
    /// runs that inject a fault and then cut the power after the whole workload.
    pub fn after_fault() -> Self {
        let env = Self::from_env();
        Self {
            per_point: if env.per_point > 3 { env.per_point } else { 1 },
            overwritten: true,
            ..env
        }
    }
}

/// Cuts the power before every operation of `kinds` the workload performs (and once after its
/// last), and checks a strict, a keep-all and random crash images of each cut.
pub fn explore<W: Workload>(w: &W, kinds: OpKinds) -> Coverage {
    explore_with(w, kinds, Images::from_env())
}

/// [`explore`] with the random images chosen as `images` says (a kept failing seed).
pub fn explore_with<W: Workload>(w: &W, kinds: OpKinds, images: Images) -> Coverage {
    let total = dry_run(w, kinds);
    cut_at(w, kinds, 0..=total, images)
}

/// Cuts the power before `samples` operations of any kind (writes included) picked at random
/// (seeded by [`base_seed`]); the long version cuts before every operation.
pub fn explore_random<W: Workload>(w: &W, samples: u64) -> Coverage {
    let total = dry_run(w, OpKinds::ALL);
    let long = random_images_per_point() > 3;
    let mut state = base_seed() ^ 0xA5A5_5A5A;
    let mut points: Vec<u64> = if long {
        (0..total).collect()
    } else {
        (0..samples)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (state >> 33) % total.max(1)
            })
            .collect()
    };
    points.sort_unstable();
    points.dedup();
    println!(
        "{}: random crash points {points:?} (seed {})",
        w.name(),
        base_seed()
    );
    cut_at(w, OpKinds::ALL, points, Images::from_env())
}

/// Runs the workload once without faults; returns how many operations of `kinds` it made.
fn dry_run<W: Workload>(w: &W, kinds: OpKinds) -> u64 {
    let dry = Disk::new();
    let mut acks = W::Acks::default();
    w.run(&dry, &mut acks, &|| {});
    let total = dry.fs.count(kinds);
    assert!(
        total > 0,
        "{}: the workload performed no crash point",
        w.name()
    );
    check_image(w, &dry.root, &acks, "without a power cut", base_seed());
    total
}

/// Cuts the power before each operation number in `points` (counting `kinds`) and checks the
/// crash images.
fn cut_at<W: Workload>(
    w: &W,
    kinds: OpKinds,
    points: impl IntoIterator<Item = u64>,
    images: Images,
) -> Coverage {
    let mut coverage = Coverage::default();
    for n in points {
        let disk = Disk::new();
        disk.fs.set_plan(FaultPlan::CrashAt { n, kinds });
        let mut acks = W::Acks::default();
        w.run(&disk, &mut acks, &|| {});
        coverage.points += 1;
        coverage.images += check_images(w, &disk, &acks, (n, ""), images);
    }
    println!(
        "power cut {}: {} crash points, {} images checked",
        w.name(),
        coverage.points,
        coverage.images
    );
    coverage
}

/// Cuts the power on `disk` (if the run has not) and checks a strict, a keep-all and random
/// crash images (seeded by [`base_seed`] and `point`); returns how many.
fn check_images<W: Workload>(
    w: &W,
    disk: &Disk,
    acks: &W::Acks,
    (point, before): (u64, &str),
    images: Images,
) -> u64 {
    let reason = disk
        .fs
        .crashed()
        .unwrap_or_else(|| "after the last operation".into());
    let reason = format!("{before}{reason}");
    disk.fs.cut_power();
    let mut modes = vec![CrashMode::Strict, CrashMode::KeepAll];
    if images.overwritten {
        modes.push(CrashMode::Overwritten);
    }
    for k in 0..images.per_point {
        let seed = images.seed ^ (point << 8) ^ k ^ (w.name().len() as u64) << 40;
        modes.push(CrashMode::Random { seed });
    }
    for &mode in &modes {
        let dir = scratch();
        let image = dir.path().join("disk");
        disk.fs
            .write_crash_image(&image, mode)
            .expect("the crash image");
        let context = format!("{reason}, image {mode:?}");
        check_image(w, &image, acks, &context, images.seed);
    }
    modes.len() as u64
}

/// What an exploration of interleavings covered.
#[derive(Debug, Default, Clone, Copy)]
pub struct Interleavings {
    /// Operations of the held thread in the run without a hold.
    pub operations: u64,
    /// Runs made (one per held operation and count of the others' operations).
    pub runs: u64,
    /// Runs in which the thread reached the operation it was held before.
    pub reached: u64,
    /// Runs cut right after the held operation.
    pub cut: u64,
    /// Crash images checked.
    pub images: u64,
}

/// Holds the thread named `thread` (a prefix) before each of its file operations in turn while
/// the other threads make each count of operations in `others` (or wait for it; the long
/// version takes every count up to the largest), then cuts the power just after the held
/// operation, and checks the crash images: every place a background operation can take among
/// the foreground's, crashed there. Fails unless some held operation was reached and cut.
pub fn explore_interleavings<W: Workload>(w: &W, thread: &str, others: &[u64]) -> Interleavings {
    let hold = |before, others| ThreadHold {
        thread: thread.to_string(),
        before,
        kinds: OpKinds::ALL,
        others,
        cut_after: true,
    };
    // A background thread's share of the work depends on the scheduler (a writer may do inline
    // what the thread was asked to do): count its operations over a few runs, keep the most.
    let mut seen = Interleavings::default();
    for _ in 0..5 {
        let dry = Disk::new();
        dry.fs.hold_thread(Some(hold(u64::MAX, 0)));
        let mut acks = W::Acks::default();
        w.run(&dry, &mut acks, &|| {});
        check_image(w, &dry.root, &acks, "without a power cut", base_seed());
        seen.operations = seen.operations.max(dry.fs.hold_report().counted);
    }
    assert!(
        seen.operations > 0,
        "{}: no operation of thread {thread} to hold",
        w.name()
    );
    let others = others_to_explore(others);
    for n in 0..seen.operations {
        for &o in &others {
            let disk = Disk::new();
            disk.fs.hold_thread(Some(hold(n, o)));
            let mut acks = W::Acks::default();
            w.run(&disk, &mut acks, &|| {});
            let report = disk.fs.hold_report();
            disk.fs.hold_thread(None);
            seen.runs += 1;
            seen.reached += u64::from(report.reached);
            seen.cut += u64::from(report.cut);
            let held = format!("{thread} held before its operation #{n} for {o} others: ");
            seen.images += check_images(w, &disk, &acks, (n << 16 | o, &held), Images::from_env());
        }
    }
    println!(
        "interleavings {} / {thread}: {seen:?} (others {others:?})",
        w.name()
    );
    assert!(
        seen.reached > 0 && seen.cut > 0,
        "{}: the held operations of {thread} were reached: {seen:?}",
        w.name()
    );
    seen
}

/// Fails each operation of the workload in turn (once, with EIO) and checks that the store
/// answered with errors, lost nothing acknowledged and ends intact; then the crash images a
/// power cut would leave after the run, and after a second run cut half-way. Returns the runs
/// made.
pub fn fail_each_operation<W: Workload>(w: &W, stride: u64) -> u64 {
    let dry = Disk::new();
    let mut acks = W::Acks::default();
    w.run(&dry, &mut acks, &|| {});
    let total = dry.fs.count(OpKinds::ALL);
    let mut runs = 0;
    for n in (0..total).step_by(stride.max(1) as usize) {
        let disk = Disk::new();
        disk.fs.set_plan(FaultPlan::FailAt {
            n,
            kinds: OpKinds::ALL,
        });
        let mut acks = W::Acks::default();
        w.run(&disk, &mut acks, &|| {});
        disk.fs.set_plan(FaultPlan::None);
        let context = format!("operation #{n} failed once");
        let outcome = w.outcome(&acks);
        assert!(
            outcome.probe_ok,
            "{}: {context}: the store did not work again: {outcome:?} {}",
            w.name(),
            w.messages(&acks).join("; ")
        );
        assert!(
            outcome.errors_before + outcome.errors_after <= w.errors_per_fault(),
            "{}: {context}: one fault caused {outcome:?}",
            w.name()
        );
        check_image(w, &disk.root, &acks, &context, base_seed());
        // Then the power fails: what the failed operation's undo left in the page cache (and
        // write-back may have made durable before it) must not take an acknowledged record's
        // place.
        let failed = format!("{context}, then ");
        check_images(w, &disk, &acks, (n, &failed), Images::after_fault());
        // And with the power cut half-way instead of a clean close: the undo's bytes and the
        // appends after it not yet covered by any checkpoint.
        let disk = Disk::new();
        disk.fs.set_plan(FaultPlan::FailAt {
            n,
            kinds: OpKinds::ALL,
        });
        let mut acks = W::Acks::default();
        let fs = disk.fs.clone();
        w.run(&disk, &mut acks, &move || fs.cut_power());
        let failed = format!("{context}, then the power cut half-way: ");
        check_images(w, &disk, &acks, (n, &failed), Images::after_fault());
        runs += 1;
    }
    println!(
        "fault {}: {runs} runs, each failing one of {total} operations",
        w.name()
    );
    runs
}

/// Runs the workload with the disk full after `budget` bytes until `between`, where space is
/// freed, on a file system that reserves blocks as `reservation` says; checks the result (no
/// mapped write into a hole while the disk was full: that is a SIGBUS). Returns how many errors
/// the full disk caused.
pub fn fill_disk<W: Workload>(w: &W, budget: u64, reservation: Reservation) -> usize {
    let disk = Disk::new();
    disk.fs.set_reservation(reservation);
    disk.fs.set_plan(FaultPlan::DiskFull { bytes: budget });
    let mut acks = W::Acks::default();
    let fs = disk.fs.clone();
    w.run(&disk, &mut acks, &move || fs.set_plan(FaultPlan::None));
    let context = format!("disk full after {budget} bytes ({reservation:?})");
    assert_eq!(
        disk.fs.sigbus(),
        None,
        "{}: {context}: a store into a mapping the full disk could not back",
        w.name()
    );
    let outcome = w.outcome(&acks);
    assert!(
        outcome.errors_after == 0 && outcome.probe_ok,
        "{}: {context}: the store did not recover once space was freed: {outcome:?} {acks:?}",
        w.name()
    );
    check_image(w, &disk.root, &acks, &context, base_seed());
    let full = format!("{context}, then ");
    check_images(w, &disk, &acks, (budget, &full), Images::after_fault());
    outcome.errors_before
}

/// [`fill_disk`] with the disk full at an eighth, a third and two thirds of what the workload
/// writes in all, on a file system that reserves blocks and on one that cannot (no fallocate);
/// the disk must have filled.
pub fn fill_disk_at_fractions<W: Workload>(w: &W) {
    for reservation in [Reservation::Reserved, Reservation::Unsupported] {
        let dry = Disk::new();
        dry.fs.set_reservation(reservation);
        let mut acks = W::Acks::default();
        w.run(&dry, &mut acks, &|| {});
        let total = dry.fs.grown();
        let errors: usize = [total / 8, total / 3, total * 2 / 3]
            .into_iter()
            .map(|budget| fill_disk(w, budget, reservation))
            .sum();
        assert!(
            errors > 0,
            "{}: the disk never filled ({total} bytes written, {reservation:?})",
            w.name()
        );
    }
}
