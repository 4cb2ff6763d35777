//! The Redis adapter: the module data type, command entry points, blocked
//! clients, timers, events and replication. All `unsafe` code of the crate
//! lives here, mostly in [`ffi`].

pub mod audit;
pub mod awaiters;
mod blocked;
mod boxes;
mod command_info;
pub mod datatype;
pub mod events;
mod ffi;
pub mod grace;
pub mod info;
pub mod keyspace;
pub mod latches;
pub mod multigrant;
pub mod multiwaiters;
pub mod orphans;
pub mod propagation;
pub mod realtime;
pub mod registry;
pub mod scheduler;
pub mod stats;
pub mod timeouts;
pub mod tokens;
mod typeio;
pub mod upkeep;
pub mod waiters;
mod wakeup;
pub mod watchers;

pub use ffi::{Argv, Ctx, KeyName, LockKey};
