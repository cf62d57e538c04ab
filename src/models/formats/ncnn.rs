//! Reader for ncnn model files (`.param` text graph + `.bin` weights), as shipped by the
//! Real-ESRGAN and Real-CUGAN ncnn packages. Produces the layers in file order with their parameters and
//! weight tensors (fp32, on the CPU), and `GraphCursor`, which lets a model builder walk them
//! in order and check the wiring; turning them into a model is the model file's job.
//!
//! Only the layer types the Real-ESRGAN and Real-CUGAN exports use are understood: a layer type whose weight
//! layout is unknown would leave every later tensor misaligned, so it is an error, not a skip.
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::Path;

use tch::{Kind, Tensor};

use crate::models::ModelError;

const PARAM_MAGIC: &str = "7767517";
/// `.bin` storage tags written before each weight blob (ncnn `ModelBinFromDataReader::load`).
const TAG_FP32: u32 = 0;
const TAG_FP16: u32 = 0x0130_6B47;
/// ncnn writes arrays as key `-23300 - id` with the value `count,v0,v1,...`.
const ARRAY_KEY_BASE: i32 = -23300;

#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    Int(i32),
    Float(f32),
    Array(Vec<f32>),
}

/// `key=value` pairs of one layer line, keyed by ncnn's numeric parameter id.
#[derive(Debug, Clone, Default)]
pub struct ParamDict(BTreeMap<i32, ParamValue>);

impl ParamDict {
    pub fn int(&self, id: i32, default: i32) -> i32 {
        match self.0.get(&id) {
            Some(ParamValue::Int(v)) => *v,
            Some(ParamValue::Float(v)) => *v as i32,
            _ => default,
        }
    }

    pub fn float(&self, id: i32, default: f32) -> f32 {
        match self.0.get(&id) {
            Some(ParamValue::Float(v)) => *v,
            Some(ParamValue::Int(v)) => *v as f32,
            _ => default,
        }
    }

    pub fn array(&self, id: i32) -> Option<&[f32]> {
        match self.0.get(&id) {
            Some(ParamValue::Array(v)) => Some(v),
            _ => None,
        }
    }
}

/// Weights that follow a layer in the `.bin`, already widened to fp32.
#[derive(Debug)]
pub enum LayerWeights {
    None,
    /// `weight` is OIHW; `bias` has `num_output` entries when the layer has a bias term.
    Convolution { weight: Tensor, bias: Option<Tensor> },
    /// A transposed convolution, stored like a convolution: `weight` is `[num_output, inputs, kh, kw]`
    /// (ncnn's order; PyTorch's `conv_transpose2d` wants the first two swapped), unflipped.
    Deconvolution { weight: Tensor, bias: Option<Tensor> },
    /// A fully connected layer: `weight` is `[num_output, inputs]`.
    InnerProduct { weight: Tensor, bias: Option<Tensor> },
    PRelu { slopes: Tensor },
}

#[derive(Debug)]
pub struct NcnnLayer {
    /// ncnn layer type, e.g. `Convolution`, `PReLU`, `Split`.
    pub kind: String,
    pub name: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub params: ParamDict,
    pub weights: LayerWeights,
}

/// Layer types that carry no weights and that the Real-ESRGAN and Real-CUGAN exports contain.
const WEIGHTLESS_KINDS: &[&str] =
    &["Input", "Split", "Concat", "Eltwise", "BinaryOp", "Interp", "PixelShuffle", "Pooling", "Crop"];

/// Parses `param` and reads the weights of every layer from `bin`; the whole `.bin` must be used.
pub fn load(param: &Path, bin: &Path) -> Result<Vec<NcnnLayer>, ModelError> {
    let text = fs::read_to_string(param).map_err(|source| io_error(param, source))?;
    let mut layers = parse_param(param, &text)?;
    let bytes = fs::read(bin).map_err(|source| io_error(bin, source))?;
    let mut reader = BinReader { path: bin, bytes: &bytes, offset: 0 };
    for layer in &mut layers {
        layer.weights = read_weights(&mut reader, layer)?;
    }
    if reader.offset != bytes.len() {
        return Err(format_error(
            bin,
            format!(
                "{} bytes left over after the last layer (read {} of {}); the .bin does not belong to {}",
                bytes.len() - reader.offset,
                reader.offset,
                bytes.len(),
                param.display()
            ),
        ));
    }
    Ok(layers)
}

fn io_error(path: &Path, source: std::io::Error) -> ModelError {
    ModelError::Io { path: path.to_path_buf(), source }
}

fn format_error(path: &Path, reason: String) -> ModelError {
    ModelError::Format { path: path.to_path_buf(), reason }
}

/// Parses the text graph; weights are left as `LayerWeights::None`.
pub fn parse_param(path: &Path, text: &str) -> Result<Vec<NcnnLayer>, ModelError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let magic = lines.next().map(|(_, l)| l.trim());
    if magic != Some(PARAM_MAGIC) {
        return Err(format_error(
            path,
            format!("first line is {magic:?}, expected the ncnn magic number {PARAM_MAGIC}"),
        ));
    }
    let (counts_line, counts) =
        lines.next().ok_or_else(|| format_error(path, "missing the `layer_count blob_count` line".into()))?;
    let layer_count = counts
        .split_whitespace()
        .next()
        .and_then(|v| v.parse::<usize>().ok())
        .ok_or_else(|| format_error(path, format!("line {}: `{counts}` is not `layer_count blob_count`", counts_line + 1)))?;
    let layers = lines
        .map(|(index, line)| parse_layer_line(path, index + 1, line))
        .collect::<Result<Vec<_>, _>>()?;
    if layers.len() != layer_count {
        return Err(format_error(
            path,
            format!("header announces {layer_count} layers but the file lists {}", layers.len()),
        ));
    }
    Ok(layers)
}

fn parse_layer_line(path: &Path, line_number: usize, line: &str) -> Result<NcnnLayer, ModelError> {
    let at = |reason: String| format_error(path, format!("line {line_number}: {reason}"));
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 4 {
        return Err(at(format!("`{line}` is not `Type name n_in n_out ...`")));
    }
    let (kind, name) = (fields[0], fields[1]);
    let count = |field: &str, what: &str| {
        field
            .parse::<usize>()
            .map_err(|_| at(format!("layer `{name}`: {what} `{field}` is not a number")))
    };
    let n_in = count(fields[2], "input count")?;
    let n_out = count(fields[3], "output count")?;
    let blobs_end = 4 + n_in + n_out;
    if fields.len() < blobs_end {
        return Err(at(format!("layer `{name}` announces {n_in} inputs and {n_out} outputs but lists fewer blobs")));
    }
    let mut params = BTreeMap::new();
    for pair in &fields[blobs_end..] {
        let (id, value) = parse_param_pair(pair).map_err(|reason| at(format!("layer `{name}`: `{pair}`: {reason}")))?;
        params.insert(id, value);
    }
    Ok(NcnnLayer {
        kind: kind.to_string(),
        name: name.to_string(),
        inputs: fields[4..4 + n_in].iter().map(|s| s.to_string()).collect(),
        outputs: fields[4 + n_in..blobs_end].iter().map(|s| s.to_string()).collect(),
        params: ParamDict(params),
        weights: LayerWeights::None,
    })
}

fn parse_param_pair(pair: &str) -> Result<(i32, ParamValue), String> {
    let (key, value) = pair.split_once('=').ok_or("expected key=value")?;
    let key: i32 = key.parse().map_err(|_| "key is not an integer")?;
    if key <= ARRAY_KEY_BASE {
        let mut items = value.split(',');
        let count: usize = items.next().unwrap_or("").parse().map_err(|_| "array count is not an integer")?;
        let values = items.map(parse_number).collect::<Result<Vec<f32>, _>>()?;
        if values.len() != count {
            return Err(format!("array announces {count} values but has {}", values.len()));
        }
        return Ok((ARRAY_KEY_BASE - key, ParamValue::Array(values)));
    }
    // ncnn's own rule: a value with a decimal point or an exponent is a float.
    if value.contains(['.', 'e', 'E']) {
        Ok((key, ParamValue::Float(parse_number(value)?)))
    } else {
        Ok((key, ParamValue::Int(value.parse().map_err(|_| format!("`{value}` is not an integer"))?)))
    }
}

fn parse_number(text: &str) -> Result<f32, String> {
    text.parse::<f32>().map_err(|_| format!("`{text}` is not a number"))
}

struct BinReader<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    offset: usize,
}

impl BinReader<'_> {
    fn take(&mut self, len: usize, what: &dyn Fn() -> String) -> Result<&[u8], ModelError> {
        let end = self.offset + len;
        if end > self.bytes.len() {
            return Err(format_error(
                self.path,
                format!(
                    "truncated: {} needs {len} bytes at offset {} but the file has {} bytes",
                    what(),
                    self.offset,
                    self.bytes.len()
                ),
            ));
        }
        let slice = &self.bytes[self.offset..end];
        self.offset = end;
        Ok(slice)
    }

    /// A tagged blob (convolution weights): fp16 (padded to 4 bytes) or raw fp32.
    fn tagged(&mut self, count: usize, what: &dyn Fn() -> String) -> Result<Tensor, ModelError> {
        let tag_offset = self.offset;
        let tag = u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes"));
        match tag {
            TAG_FP16 => {
                let data = self.take(count * 2, what)?;
                let tensor = Tensor::from_data_size(data, &[count as i64], Kind::Half).to_kind(Kind::Float);
                self.take((count * 2) % 4, what)?;
                Ok(tensor)
            }
            TAG_FP32 => self.raw_f32(count, what),
            other => Err(format_error(
                self.path,
                format!(
                    "{}: unsupported weight storage tag 0x{other:08X} at offset {tag_offset} \
                     (expected 0x{TAG_FP16:08X} for fp16 or 0 for fp32; quantized files are not supported)",
                    what()
                ),
            )),
        }
    }

    fn raw_f32(&mut self, count: usize, what: &dyn Fn() -> String) -> Result<Tensor, ModelError> {
        let data = self.take(count * 4, what)?;
        let values: Vec<f32> = data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
        if let Some(bad) = values.iter().position(|v| !v.is_finite()) {
            return Err(format_error(self.path, format!("{}: value {bad} is not finite", what())));
        }
        Ok(Tensor::from_slice(&values))
    }
}

fn read_weights(reader: &mut BinReader, layer: &NcnnLayer) -> Result<LayerWeights, ModelError> {
    match layer.kind.as_str() {
        "Convolution" => {
            let (weight, bias) = read_kernel(reader, layer)?;
            Ok(LayerWeights::Convolution { weight, bias })
        }
        "Deconvolution" => {
            let (weight, bias) = read_kernel(reader, layer)?;
            Ok(LayerWeights::Deconvolution { weight, bias })
        }
        "InnerProduct" => read_inner_product(reader, layer),
        "PReLU" => {
            let num_slope = positive_param(reader.path, layer, 0, "num_slope")?;
            let what = || format!("PReLU `{}` slopes ({num_slope} fp32)", layer.name);
            Ok(LayerWeights::PRelu { slopes: reader.raw_f32(num_slope, &what)? })
        }
        kind if WEIGHTLESS_KINDS.contains(&kind) => Ok(LayerWeights::None),
        kind => Err(format_error(
            reader.path,
            format!("layer `{}` has type `{kind}`, which this reader does not know how to read weights for", layer.name),
        )),
    }
}

/// A convolution's or deconvolution's weights (both are stored the same way) and bias.
fn read_kernel(reader: &mut BinReader, layer: &NcnnLayer) -> Result<(Tensor, Option<Tensor>), ModelError> {
    let num_output = positive_param(reader.path, layer, 0, "num_output")?;
    let kernel_w = positive_param(reader.path, layer, 1, "kernel_w")?;
    let kernel_h = layer.params.int(11, kernel_w as i32) as usize;
    let weight_count = positive_param(reader.path, layer, 6, "weight_data_size")?;
    if layer.params.int(8, 0) != 0 {
        return Err(format_error(reader.path, format!("{} `{}` is int8-quantized (8=1), not supported", layer.kind, layer.name)));
    }
    let per_output = num_output * kernel_h * kernel_w;
    if weight_count % per_output != 0 {
        return Err(format_error(
            reader.path,
            format!(
                "{} `{}`: weight_data_size {weight_count} is not a multiple of num_output×kernel ({per_output})",
                layer.kind, layer.name
            ),
        ));
    }
    let in_channels = weight_count / per_output;
    let what = || format!("{} `{}` weights ({weight_count} values)", layer.kind, layer.name);
    let weight = reader.tagged(weight_count, &what)?.reshape([
        num_output as i64,
        in_channels as i64,
        kernel_h as i64,
        kernel_w as i64,
    ]);
    let bias = read_bias(reader, layer, 5, num_output)?;
    Ok((weight, bias))
}

fn read_inner_product(reader: &mut BinReader, layer: &NcnnLayer) -> Result<LayerWeights, ModelError> {
    let num_output = positive_param(reader.path, layer, 0, "num_output")?;
    let weight_count = positive_param(reader.path, layer, 2, "weight_data_size")?;
    if layer.params.int(8, 0) != 0 {
        return Err(format_error(reader.path, format!("InnerProduct `{}` is int8-quantized (8=1), not supported", layer.name)));
    }
    if weight_count % num_output != 0 {
        return Err(format_error(
            reader.path,
            format!("InnerProduct `{}`: weight_data_size {weight_count} is not a multiple of num_output {num_output}", layer.name),
        ));
    }
    let what = || format!("InnerProduct `{}` weights ({weight_count} values)", layer.name);
    let weight = reader.tagged(weight_count, &what)?.reshape([num_output as i64, (weight_count / num_output) as i64]);
    let bias = read_bias(reader, layer, 1, num_output)?;
    Ok(LayerWeights::InnerProduct { weight, bias })
}

/// The raw fp32 bias that follows the weights when parameter `flag_id` (`bias_term`) is set.
fn read_bias(reader: &mut BinReader, layer: &NcnnLayer, flag_id: i32, num_output: usize) -> Result<Option<Tensor>, ModelError> {
    if layer.params.int(flag_id, 0) == 0 {
        return Ok(None);
    }
    let what = || format!("{} `{}` bias ({num_output} fp32)", layer.kind, layer.name);
    Ok(Some(reader.raw_f32(num_output, &what)?))
}

fn positive_param(path: &Path, layer: &NcnnLayer, id: i32, what: &str) -> Result<usize, ModelError> {
    match layer.params.int(id, 0) {
        v if v > 0 => Ok(v as usize),
        v => Err(format_error(path, format!("{} `{}`: {what} ({id}=) is {v}, must be positive", layer.kind, layer.name))),
    }
}

// ---------------------------------------------------------------------------------------------
// Walking the graph.

/// Reads layers in file order, looking through `Split` (ncnn's explicit fan-out) so that the
/// builders can state which blob each layer must read.
pub struct GraphCursor<'a> {
    path: &'a Path,
    layers: &'a [NcnnLayer],
    position: usize,
    split_sources: HashMap<&'a str, &'a str>,
}

impl<'a> GraphCursor<'a> {
    pub fn new(path: &'a Path, layers: &'a [NcnnLayer]) -> Result<Self, ModelError> {
        let mut split_sources = HashMap::new();
        for split in layers.iter().filter(|l| l.kind == "Split") {
            let [source] = split.inputs.as_slice() else {
                return Err(layer_error(path, split, "a Split must have exactly one input"));
            };
            for output in &split.outputs {
                split_sources.insert(output.as_str(), source.as_str());
            }
        }
        Ok(Self { path, layers, position: 0, split_sources })
    }

    pub fn error(&self, layer: &NcnnLayer, reason: impl std::fmt::Display) -> ModelError {
        layer_error(self.path, layer, reason)
    }

    /// The blob a name stands for once Splits are looked through.
    pub fn origin(&self, blob: &'a str) -> &'a str {
        let mut current = blob;
        for _ in 0..=self.layers.len() {
            match self.split_sources.get(current) {
                Some(source) => current = source,
                None => break,
            }
        }
        current
    }

    /// Layers not consumed yet (Splits included).
    pub fn remaining(&self) -> &'a [NcnnLayer] {
        &self.layers[self.position..]
    }

    fn skip_splits(&mut self) {
        while self.layers.get(self.position).is_some_and(|l| l.kind == "Split") {
            self.position += 1;
        }
    }

    pub fn peek_kind(&mut self) -> Option<&'a str> {
        self.skip_splits();
        self.layers.get(self.position).map(|l| l.kind.as_str())
    }

    pub fn take(&mut self, kind: &str) -> Result<&'a NcnnLayer, ModelError> {
        self.skip_splits();
        let Some(layer) = self.layers.get(self.position) else {
            return Err(ModelError::Format {
                path: self.path.to_path_buf(),
                reason: format!("the graph ends where a {kind} layer was expected"),
            });
        };
        if layer.kind != kind {
            return Err(self.error(layer, format!("expected a {kind} layer here")));
        }
        self.position += 1;
        Ok(layer)
    }

    pub fn output(&self, layer: &'a NcnnLayer) -> Result<&'a str, ModelError> {
        match layer.outputs.as_slice() {
            [output] => Ok(output),
            other => Err(self.error(layer, format!("has {} outputs, expected 1", other.len()))),
        }
    }

    pub fn check_inputs(&self, layer: &'a NcnnLayer, expected: &[&'a str]) -> Result<(), ModelError> {
        let actual: Vec<&str> = layer.inputs.iter().map(|b| self.origin(b)).collect();
        let wanted: Vec<&str> = expected.iter().map(|b| self.origin(b)).collect();
        if actual != wanted {
            return Err(self.error(layer, format!("reads {actual:?}; this architecture needs {wanted:?} here")));
        }
        Ok(())
    }

    /// For commutative layers (Add): same inputs in any order.
    pub fn check_inputs_unordered(&self, layer: &'a NcnnLayer, expected: [&'a str; 2]) -> Result<(), ModelError> {
        let [a, b] = expected;
        self.check_inputs(layer, &[a, b]).or_else(|_| self.check_inputs(layer, &[b, a]))
    }

    pub fn finish(mut self) -> Result<(), ModelError> {
        self.skip_splits();
        match self.layers.get(self.position) {
            Some(layer) => Err(self.error(layer, "unexpected layer after the end of the recognised architecture")),
            None => Ok(()),
        }
    }
}

pub fn layer_error(path: &Path, layer: &NcnnLayer, reason: impl std::fmt::Display) -> ModelError {
    ModelError::Format { path: path.to_path_buf(), reason: format!("layer `{}` ({}): {reason}", layer.name, layer.kind) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_arrays_floats_and_ints() {
        let (id, value) = parse_param_pair("-23310=1,2.000000e-01").unwrap();
        assert_eq!((id, value), (10, ParamValue::Array(vec![0.2])));
        assert_eq!(parse_param_pair("1=2.000000e+00").unwrap(), (1, ParamValue::Float(2.0)));
        assert_eq!(parse_param_pair("6=36864").unwrap(), (6, ParamValue::Int(36864)));
        assert!(parse_param_pair("-23301=3,0.2,1.0").is_err());
    }

    #[test]
    fn rejects_wrong_magic() {
        let err = parse_param(Path::new("x.param"), "garbage\n1 1\n").unwrap_err();
        assert!(err.to_string().contains("magic"), "{err}");
    }

    #[test]
    fn path_is_kept_in_errors() {
        let err = parse_param(Path::new("m.param"), "7767517\n2 2\nInput in 0 1 data\n").unwrap_err();
        assert!(err.to_string().contains("m.param") && err.to_string().contains("2 layers"), "{err}");
    }
}
