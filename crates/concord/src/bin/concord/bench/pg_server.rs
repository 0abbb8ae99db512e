//! A throw-away PostgreSQL server: Debian's `postgresql` package (installed by `.ci/run`
//! and README's test command through `scripts/ensure-postgresql`), initialised in a fresh
//! temporary directory, listening only on a Unix socket there (no port to pick), started
//! and stopped with `pg_ctl`, the directory removed on drop. As root it runs as the
//! `postgres` user the package creates (PostgreSQL refuses to run as root). Used by
//! `concord bench persistence` and the persistence tests (which include this file).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A running server; stopped (fast shutdown) and removed on drop.
pub struct PgServer {
    dir: PathBuf,
    bin: PathBuf,
}

/// The directory of PostgreSQL's server programs: `$CONCORD_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian's layout).
fn bin_dir() -> Result<PathBuf, String> {
    if let Ok(d) = std::env::var("CONCORD_PG_BIN") {
        return Ok(PathBuf::from(d));
    }
    let missing = || {
        "PostgreSQL's server programs are not installed: run scripts/ensure-postgresql (Debian's postgresql package)".to_string()
    };
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| missing())?
        .filter_map(|e| {
            let e = e.ok()?;
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            Some((v, e.path().join("bin")))
        })
        .collect();
    versions.sort();
    versions.pop().map(|v| v.1).ok_or_else(missing)
}

/// True if this process runs as root (asked once).
fn is_root() -> bool {
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ROOT.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
    })
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

fn run(mut c: Command, what: &str) -> Result<(), String> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Stops and removes the servers of processes that died without doing so (killed tests or
/// benchmarks): directories `concord-pg-<pid>-*` whose process is gone.
fn remove_orphans(bin: &Path) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("concord-pg-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let data = e.path().join("data");
        if data.join("postmaster.pid").exists() {
            let _ = command(
                &bin.join("pg_ctl"),
                &[
                    "-D",
                    data.to_str().unwrap_or_default(),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        }
        let _ = std::fs::remove_dir_all(e.path());
    }
}

impl PgServer {
    /// Initialises and starts a server; returns once it accepts connections. First stops
    /// and removes the servers of processes that died without doing so.
    ///
    /// # Errors
    /// PostgreSQL is not installed, or `initdb` or `pg_ctl start` failed (their output).
    pub fn try_start() -> Result<PgServer, String> {
        let bin = bin_dir()?;
        remove_orphans(&bin);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("concord-pg-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // From here on, drop removes the directory (and stops a started server).
        let server = PgServer { dir, bin };
        if is_root() {
            let mut chown = Command::new("chown");
            chown.arg("postgres:postgres").arg(&server.dir);
            run(chown, "chown to the postgres user")?;
        }
        let data = server.data();
        let d = server
            .dir
            .to_str()
            .ok_or("a temporary directory that is not UTF-8")?;
        run(
            command(
                &server.bin.join("initdb"),
                &[
                    "-D",
                    data.to_str().unwrap_or_default(),
                    "-U",
                    "concord",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
            ),
            "initdb",
        )?;
        let options = format!("-k {d} -c listen_addresses= -c max_connections=200");
        let log = server.dir.join("server.log");
        run(
            command(
                &server.bin.join("pg_ctl"),
                &[
                    "-D",
                    data.to_str().unwrap_or_default(),
                    "-o",
                    &options,
                    "-l",
                    log.to_str().unwrap_or_default(),
                    "-t",
                    "60",
                    "-w",
                    "start",
                ],
            ),
            "pg_ctl start",
        )
        .map_err(|e| format!("{e}\n{}", std::fs::read_to_string(&log).unwrap_or_default()))?;
        Ok(server)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The connection string (Unix socket in the server's directory).
    pub fn url(&self) -> String {
        format!("host={} user=concord dbname=postgres", self.dir.display())
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // Fast shutdown (connections rolled back), waiting until the server has exited,
        // then the directory. A server left behind by a killed process (no drop) is
        // stopped by the next `try_start` on this machine.
        if self.data().join("postmaster.pid").exists() {
            let data = self.data();
            let _ = command(
                &self.bin.join("pg_ctl"),
                &[
                    "-D",
                    data.to_str().unwrap_or_default(),
                    "-m",
                    "fast",
                    "-w",
                    "stop",
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
