//! The command line of the `snowmint` binary, one concept a file: [`flags`] (the commands
//! and the flags they share), [`serve`] (the server's flags and start), [`decode`] (offline
//! decoding, and provenance from the slot history), [`audit`] (the slot history's check),
//! [`fence`] (the fence of etcd's restore procedure), [`sequence`] (named sequences made and
//! inspected), [`token`] (bearer tokens for the tenants' policy),
//! [`clients`] (the small clients `next` and `batch`) and [`bench`] (the load tool); [`opaque`]
//! reads the opaque key file of `serve` and `decode`. The small clients and the load tool use
//! `snowmint-client`, the library stays the
//! server's.

pub mod audit;
pub mod bench;
pub mod clients;
pub mod decode;
pub mod fence;
pub mod flags;
pub mod opaque;
pub mod sequence;
pub mod serve;
pub mod token;

pub use flags::{Cli, Command};
