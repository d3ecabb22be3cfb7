//! Progress on a terminal: a one-line status on stderr, redrawn by a
//! background thread while a long operation runs, and only when stderr is
//! a terminal (never in pipes, files or tests).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the status line shows, updated by the operation.
pub type Status = Arc<Mutex<String>>;

/// A running status line; cleared when dropped.
pub struct Progress {
    status: Status,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts a status line with `what` if stderr is a terminal; otherwise
    /// the returned handle only records the status.
    pub fn start(what: &str) -> Self {
        let status: Status = Arc::new(Mutex::new(what.to_string()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::io::stderr().is_terminal().then(|| {
            let (status, stop) = (status.clone(), stop.clone());
            std::thread::spawn(move || {
                const SPIN: [char; 4] = ['|', '/', '-', '\\'];
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let line = status.lock().map(|s| s.clone()).unwrap_or_default();
                    let mut e = std::io::stderr().lock();
                    let _ = write!(e, "\r\x1b[K{} {line}", SPIN[i % SPIN.len()]);
                    let _ = e.flush();
                    drop(e);
                    i += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                let mut e = std::io::stderr().lock();
                let _ = write!(e, "\r\x1b[K");
                let _ = e.flush();
            })
        });
        Self {
            status,
            stop,
            thread,
        }
    }

    /// The status the operation updates.
    pub fn status(&self) -> Status {
        self.status.clone()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sets a status line's text.
pub fn set(status: &Status, text: String) {
    if let Ok(mut s) = status.lock() {
        *s = text;
    }
}
