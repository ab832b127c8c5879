//! The root crate's helpers: the real `agent` binary (run in place, installed, serving),
//! and everything of `agent-test-support`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

pub use agent_test_support::*;

/// The `agent` binary built for this test run.
pub fn agent_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_agent"))
}

/// Starts `agent serve --model SPEC --model-id ID` on a free port; returns the child and
/// its base URL.
pub fn start_server(model_spec: &str, model_id: &str) -> (Server, String) {
    start_server_with(model_spec, model_id, &[])
}

/// A running `agent serve`, killed when dropped: a failed test must not leave it holding
/// the test binary's output open.
pub struct Server(std::process::Child);

impl std::ops::Deref for Server {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Server {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// [`start_server`] with more `agent serve` arguments.
pub fn start_server_with(model_spec: &str, model_id: &str, extra: &[&str]) -> (Server, String) {
    let mut args = vec!["--model-id", model_id, "--model", model_spec];
    args.extend_from_slice(extra);
    serve(&args)
}

/// Starts `agent serve --port 0 ARGS…`; returns the child and its base URL.
pub fn serve(args: &[&str]) -> (Server, String) {
    let mut child = Command::new(agent_bin())
        .args(["serve", "--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let url = line.split_whitespace().nth(2).expect("no address printed").to_string();
    (Server(child), url)
}

/// The binary as `cargo install` leaves it: copied into `dir/bin`, run in `dir/work`
/// (created) with its cache in `dir/cache`, far from the source tree.
pub fn installed(dir: &std::path::Path) -> Command {
    installed_with_cache(dir, &dir.join("cache"))
}

/// [`installed`] with the cache somewhere else (the models cached by the test set-up).
pub fn installed_with_cache(dir: &std::path::Path, cache: &std::path::Path) -> Command {
    let bin = dir.join("bin");
    let work = dir.join("work");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let agent = bin.join("agent");
    if !agent.is_file() {
        std::fs::copy(agent_bin(), &agent).unwrap();
        wait_until_executable(&agent);
    }
    let mut c = Command::new(agent);
    c.current_dir(work).env("AGENT_CACHE_DIR", cache);
    c
}

/// Waits out ETXTBSY on a binary this process just wrote: a child forked by another test
/// thread while the copy's file was open for writing holds that descriptor until it execs,
/// and until then the kernel refuses to run the file.
fn wait_until_executable(bin: &std::path::Path) {
    for _ in 0..100 {
        match Command::new(bin).arg("--version").output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            Err(e) => panic!("cannot run {}: {e}", bin.display()),
            Ok(_) => return,
        }
    }
    panic!("{} stayed busy for 5 s after it was copied", bin.display());
}
