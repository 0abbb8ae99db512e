//! A real PostgreSQL server for a test: Debian's `postgresql` package (installed by
//! `.ci/run` and README's test command), started in a temporary directory, listening only
//! on a Unix socket there (no port to pick), stopped and removed on drop. As root it runs
//! as the `postgres` user the package creates (PostgreSQL refuses to run as root).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct PgServer {
    dir: tempfile::TempDir,
    child: Child,
}

/// The directory of PostgreSQL's server programs: `$CONCORD_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian's layout).
fn bin_dir() -> PathBuf {
    if let Ok(d) = std::env::var("CONCORD_PG_BIN") {
        return PathBuf::from(d);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is not installed: apt-get install postgresql (see .ci/run)")
        .filter_map(|e| {
            let e = e.ok()?;
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("no /usr/lib/postgresql/<version>/bin")
        .1
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// `program` with `args`, as the `postgres` user when we are root.
fn command(program: &Path, args: &[&str]) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program).args(args);
        c
    } else {
        let mut c = Command::new(program);
        c.args(args);
        c
    }
}

impl PgServer {
    /// Initialises and starts a server; returns once it accepts connections.
    pub fn start() -> PgServer {
        let bin = bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("concord-pg")
            .tempdir()
            .unwrap();
        if is_root() {
            let chown = Command::new("chown")
                .arg("postgres:postgres")
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(
                chown.success(),
                "chown to the postgres user (created by Debian's postgresql package)"
            );
        }
        let data = dir.path().join("data");
        let d = dir.path().to_str().unwrap().to_string();
        let d = d.as_str();
        let status = command(
            &bin.join("initdb"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "concord",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )
        .stdout(Stdio::null())
        .status()
        .expect("initdb runs");
        assert!(status.success(), "initdb failed");
        let child = command(
            &bin.join("postgres"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-k",
                d,
                "-c",
                "listen_addresses=",
                "-c",
                "max_connections=200",
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("postgres starts");
        let server = PgServer { dir, child };
        let socket = server.dir.path().join(".s.PGSQL.5432");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if socket.exists()
                && Command::new(bin.join("pg_isready"))
                    .args(["-h", d, "-U", "concord", "-d", "postgres"])
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "PostgreSQL did not start in 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// The connection string (Unix socket in the server's directory).
    pub fn url(&self) -> String {
        format!(
            "host={} user=concord dbname=postgres",
            self.dir.path().display()
        )
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown. The child is runuser's or postgres's pid;
        // runuser passes the signal on.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
