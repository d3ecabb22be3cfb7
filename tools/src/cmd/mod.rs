//! One module per subcommand. Each exposes its clap arguments and a `run`
//! function writing into the output it is given; device commands go through
//! [`crate::device`]; `pingpong` and `perf` (which need the verbs API) set
//! their sides up through [`crate::rdma`] and meet over [`crate::peer`].

pub mod bind;
pub mod caps;
pub mod capture;
pub mod devattr;
pub mod health;
pub mod info;
pub mod list;
pub mod perf;
pub mod pingpong;
pub mod trace;
