//! The Redis adapter: the module data type, command entry points, replication
//! and the global token counter. All `unsafe` code of the crate lives here,
//! mostly in [`ffi`].

pub mod datatype;
mod ffi;
pub mod registry;
pub mod tokens;

pub use ffi::{Argv, Ctx, KeyName, LockKey};
