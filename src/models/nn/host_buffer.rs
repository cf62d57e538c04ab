//! Large host buffers that report a failed allocation instead of aborting the process.
//!
//! Rust aborts the whole server when an ordinary `vec!` cannot be allocated. The frame and tile
//! buffers here are allocated in the middle of a job, right when the model has taken most of the
//! memory; failing them as out of memory lets the job's retries (shorter pushes, smaller tiles) or its
//! failure take over, and the server keeps serving.
use crate::models::ModelError;

/// `len` default values, or [`ModelError::HostOutOfMemory`].
pub fn zeroed<T: Clone + Default>(len: usize) -> Result<Vec<T>, ModelError> {
    let mut buffer = Vec::new();
    buffer
        .try_reserve_exact(len)
        .map_err(|_| ModelError::HostOutOfMemory { bytes: len.saturating_mul(std::mem::size_of::<T>()) })?;
    buffer.resize(len, T::default());
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_impossible_buffer_is_an_out_of_memory_error() {
        let error = zeroed::<u64>(usize::MAX / 16).unwrap_err();
        assert!(matches!(error, ModelError::HostOutOfMemory { .. }), "{error}");
        assert_eq!(error.code(), crate::error_codes::OUT_OF_MEMORY);
        assert_eq!(zeroed::<u8>(3).unwrap(), vec![0, 0, 0]);
    }
}
