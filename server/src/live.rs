//! A value the running server replaces whole while requests read it (what it makes of
//! its config, read again when the file changes): each reader takes the value as it is
//! and keeps that one for what it does.

use std::sync::{Arc, RwLock};

/// The current value.
#[derive(Debug)]
pub struct Live<T>(RwLock<Arc<T>>);

impl<T> Live<T> {
    pub fn new(value: T) -> Self {
        Self(RwLock::new(Arc::new(value)))
    }

    /// The value now.
    pub fn get(&self) -> Arc<T> {
        // Nothing panics while holding it: a poisoned lock still holds a whole value.
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces it: readers from now on take `value`.
    pub fn replace(&self, value: T) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(value);
    }
}
