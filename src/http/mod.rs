//! HTTP/1.1 on httparse: request heads and bodies in, typed responses out.
//! Decides nothing about streams (DESIGN.md "Layers").

pub mod chunked;
pub mod fields;
pub mod parse;
pub mod render;
pub mod target;
