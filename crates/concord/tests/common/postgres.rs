//! A real PostgreSQL server for a test: the `concord` binary's
//! (`src/bin/concord/bench/pg_server.rs`), compiled here as a binary's modules cannot be
//! imported.

#[path = "../../src/bin/concord/bench/pg_server.rs"]
mod pg_server;

pub use pg_server::PgServer;

impl PgServer {
    /// Like [`PgServer::try_start`], panicking on failure.
    pub fn start() -> PgServer {
        PgServer::try_start().unwrap_or_else(|e| panic!("{e}"))
    }
}
