//! Progress bars (indicatif) for the stages that `tessera-formats` reports.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::{ProgressBar, ProgressStyle};
use tessera_formats::Progress;

/// Set by the first Ctrl-C (or SIGTERM): long work stops at its next progress report and
/// removes its temporary files; a second signal removes the listed temporaries and exits.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Installs the handler that sets the interruption flag (once per process).
pub fn install_interrupt_handler() {
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            // Exiting does not unwind: remove the temporaries being written first.
            tessera_formats::remove_pending_files();
            std::process::exit(130);
        }
    });
}

/// True once the user asked to stop.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// One bar per stage on stderr; hidden when stderr is not a terminal or when quiet.
pub struct Bars {
    bar: RefCell<Option<ProgressBar>>,
    quiet: bool,
}

impl Bars {
    pub fn new(quiet: bool) -> Self {
        Bars {
            bar: RefCell::new(None),
            quiet,
        }
    }

    fn make(&self, name: &str, total: u64, bytes: bool) -> ProgressBar {
        if self.quiet {
            return ProgressBar::hidden();
        }
        let bar = if total > 0 {
            ProgressBar::new(total)
        } else {
            ProgressBar::new_spinner()
        };
        let counter = if bytes {
            "{bytes}/{total_bytes} ({bytes_per_sec}, {eta})"
        } else {
            "{human_pos}/{human_len} ({per_sec}, {eta})"
        };
        let template = if total > 0 {
            format!("{{prefix:>12}} [{{elapsed_precise}}] {{wide_bar}} {counter}")
        } else {
            "{prefix:>12} [{elapsed_precise}] {spinner} {human_pos}".to_string()
        };
        bar.set_style(ProgressStyle::with_template(&template).expect("valid template"));
        bar.set_prefix(name.to_string());
        bar
    }

    /// A bar counting items (not bytes), for the generator.
    pub fn items(&self, name: &str, total: u64) -> ProgressBar {
        self.make(name, total, false)
    }
}

impl Progress for Bars {
    fn stage(&self, name: &str, total: u64) {
        // Byte-sized stages read files; merge and count stages count entries.
        let bytes = matches!(name, "scan" | "write" | "sort runs" | "validate");
        let bar = self.make(name, total, bytes);
        if let Some(old) = self.bar.replace(Some(bar)) {
            old.finish_and_clear();
        }
    }
    fn update(&self, done: u64) {
        if let Some(b) = &*self.bar.borrow() {
            b.set_position(done);
        }
    }
    fn end_stage(&self) {
        if let Some(b) = self.bar.borrow_mut().take() {
            b.finish_and_clear();
        }
    }
    fn cancelled(&self) -> bool {
        interrupted()
    }
}
