//! What a command does, as the command table describes it once per command
//! ([`CommandClass`]); every per-command property that follows from it (write or not,
//! opLatencies kind, DDL journal sync, where a replica-set member runs it) is derived here.

use crate::latency::LatencyKind;

/// What a command does. Every per-command property that follows from it is derived here, once:
/// [`CommandClass::is_write`], [`CommandClass::latency_kind`],
/// [`CommandClass::needs_secondary_read_preference`] and [`CommandClass::is_ddl`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandClass {
    /// Reads documents (find, aggregate, count, distinct): a read in opLatencies; on a
    /// replica-set secondary only with a read preference that allows it.
    Read,
    /// Continues a cursor (getMore): a read, wherever its cursor was opened.
    Continue,
    /// Reads a catalog or statistics of user data (listCollections, collStats...): a command
    /// in opLatencies; on a secondary only with a read preference that allows it.
    CatalogRead,
    /// Writes documents: a write in opLatencies and opcounters; takes `w`/`j`; primary only.
    DataWrite,
    /// Changes the catalog: takes `w`/`j` (a journaled one syncs the WAL after it); primary only.
    Ddl,
    /// Any other write (users, roles, compact): takes `w`/`j`; primary only.
    OtherWrite,
    /// Everything else: the handshake, diagnostics, sessions, settings.
    Command,
}

impl CommandClass {
    pub fn is_write(self) -> bool {
        matches!(self, CommandClass::DataWrite | CommandClass::Ddl | CommandClass::OtherWrite)
    }

    pub fn is_ddl(self) -> bool {
        self == CommandClass::Ddl
    }

    /// serverStatus.opLatencies' kind, as mongod classifies commands.
    pub fn latency_kind(self) -> LatencyKind {
        match self {
            CommandClass::Read | CommandClass::Continue => LatencyKind::Reads,
            CommandClass::DataWrite => LatencyKind::Writes,
            _ => LatencyKind::Commands,
        }
    }

    /// On a member that is not the primary, it runs only when the request's read preference
    /// allows a secondary.
    pub fn needs_secondary_read_preference(self) -> bool {
        matches!(self, CommandClass::Read | CommandClass::CatalogRead)
    }
}
