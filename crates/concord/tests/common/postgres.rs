//! A real PostgreSQL server for a test: Debian's `postgresql` package (installed by
//! `.ci/run` and README's test command), started in a temporary directory, listening only
//! on a Unix socket there (no port to pick), started and stopped with `pg_ctl`, removed on
//! drop. As root it runs
//! as the `postgres` user the package creates (PostgreSQL refuses to run as root).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
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
        // pg_ctl starts the server in the background and waits until it accepts
        // connections; its log is in the directory.
        let options = format!("-k {d} -c listen_addresses= -c max_connections=200");
        let log = dir.path().join("server.log");
        let status = command(
            &bin.join("pg_ctl"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &options,
                "-l",
                log.to_str().unwrap(),
                "-t",
                "60",
                "-w",
                "start",
            ],
        )
        .stdout(Stdio::null())
        .status()
        .expect("pg_ctl runs");
        assert!(
            status.success(),
            "PostgreSQL did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        PgServer { dir, bin }
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
        // Fast shutdown (connections rolled back), waiting until the server has exited,
        // before the directory goes. A server left behind by a killed test process exits
        // by itself once its directory (and lock file) is gone.
        let data = self.dir.path().join("data");
        let _ = command(
            &self.bin.join("pg_ctl"),
            &["-D", data.to_str().unwrap(), "-m", "fast", "-w", "stop"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    }
}
