//! What a `#![no_std]` plugin needs in scope that `std`'s prelude would give it:
//! `use hookhost_plugin_sdk::prelude::*;`.

pub use alloc::borrow::{Cow, ToOwned};
pub use alloc::boxed::Box;
pub use alloc::string::{String, ToString};
pub use alloc::vec::Vec;
pub use alloc::{format, vec};
