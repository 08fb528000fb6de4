//! The command line as its users run it: `transform`, `run` and `submit`.

mod run;
mod submit;
mod transform;
