//! SIGINT, SIGTERM, SIGHUP and SIGQUIT as a value the run loop can select on: each
//! ends a long-running command the same way, removing what it started (a closed SSH
//! session or terminal sends SIGHUP; `Ctrl+\` sends SIGQUIT).

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// Watches SIGINT, SIGTERM, SIGHUP and SIGQUIT; the first one received is kept.
pub struct Signals {
    rx: watch::Receiver<Option<i32>>,
}

impl Signals {
    /// Installs the handlers (from now on the signals no longer kill the process).
    pub fn install() -> std::io::Result<Self> {
        let (tx, rx) = watch::channel(None);
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut hup = signal(SignalKind::hangup())?;
        let mut quit = signal(SignalKind::quit())?;
        tokio::spawn(async move {
            loop {
                let sig = tokio::select! {
                    _ = int.recv() => libc::SIGINT,
                    _ = term.recv() => libc::SIGTERM,
                    _ = hup.recv() => libc::SIGHUP,
                    _ = quit.recv() => libc::SIGQUIT,
                };
                let _ = tx.send(Some(sig));
            }
        });
        Ok(Self { rx })
    }

    /// Waits for a signal; returns its number.
    pub async fn recv(&mut self) -> i32 {
        loop {
            if self.rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            if let Some(s) = *self.rx.borrow_and_update() {
                return s;
            }
        }
    }

    /// The signal received so far, if any (for loops that poll instead of awaiting).
    pub fn received(&self) -> Option<i32> {
        *self.rx.borrow()
    }

    /// The exit code for a signal (128 + number).
    pub fn exit_code(sig: i32) -> u8 {
        (128 + sig).clamp(0, 255) as u8
    }
}
