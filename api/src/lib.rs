//! The rest-lite API's view types: what its OpenAPI document describes, what the server
//! answers and the client reads. Built from a Framework ([`status::job_view`]), never from
//! the server's state, so the client and the pages share them without the server.

pub mod error;
pub mod jobs;
pub mod path;
pub mod routes;
pub mod ssh;
pub mod status;
pub mod storages;
pub mod time;
pub mod v2;
pub mod waiting;
