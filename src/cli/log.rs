//! Where the binary's log records go: stderr, except while the interactive UI owns the
//! terminal, when they go to a file (a record written on the alternate screen would land
//! across the UI's composer box). `/help` names the file.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use tracing_subscriber::fmt::MakeWriter;

/// The file that takes the records instead of stderr while one is set, with its path
/// ([`to_stderr`] removes the file again when nothing was written to it).
static REDIRECT: Mutex<Option<(File, PathBuf)>> = Mutex::new(None);

/// The `tracing` writer: stderr, or the file set by [`to_file`].
#[derive(Debug, Clone, Copy, Default)]
pub struct LogWriter;

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Box<dyn Write + 'a>;

    fn make_writer(&'a self) -> Self::Writer {
        let file = REDIRECT.lock().ok().and_then(|g| g.as_ref().and_then(|(f, _)| f.try_clone().ok()));
        match file {
            Some(f) => Box::new(f),
            None => Box::new(std::io::stderr()),
        }
    }
}

/// Sends log records to a new file under the user's state folder until [`to_stderr`];
/// returns its path, or `None` (records stay on stderr) when no file can be made.
pub fn to_file(run_id: &str) -> Option<PathBuf> {
    let dir = dirs::state_dir().or_else(dirs::cache_dir)?.join("agent").join("logs");
    std::fs::create_dir_all(&dir).ok()?;
    let path = dir.join(format!("ui-{run_id}.log"));
    let file = std::fs::OpenOptions::new().create(true).append(true).open(&path).ok()?;
    *REDIRECT.lock().ok()? = Some((file, path.clone()));
    Some(path)
}

/// Sends log records to stderr again; a log file that stayed empty is removed.
pub fn to_stderr() {
    let path = REDIRECT.lock().ok().and_then(|mut g| g.take()).map(|(_, path)| path);
    if let Some(path) = path.filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() == 0)) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_go_to_the_file_while_it_is_set_and_to_stderr_after() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("ui.log");
        *REDIRECT.lock().unwrap() = Some((File::create(&path).unwrap(), path.clone()));
        LogWriter.make_writer().write_all(b"WARN one\n").unwrap();
        to_stderr();
        LogWriter.make_writer().write_all(b"").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "WARN one\n", "a file with records is kept");
        assert!(REDIRECT.lock().unwrap().is_none());
        // One that stayed empty is removed.
        let empty = tmp.path().join("empty.log");
        *REDIRECT.lock().unwrap() = Some((File::create(&empty).unwrap(), empty.clone()));
        to_stderr();
        assert!(!empty.exists());
    }
}
