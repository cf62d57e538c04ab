//! Checkpoint file formats: ncnn param/bin pairs, GGUF (with its quantised blocks), safetensors and
//! PyTorch pickles, read into tensors by name (`checkpoint` picks the reader by the file).
pub mod checkpoint;
pub mod gguf;
pub mod gguf_quants;
pub mod ncnn;
pub mod tensor_file;
pub mod torch_file;
