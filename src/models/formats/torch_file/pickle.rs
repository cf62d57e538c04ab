//! A data-only pickle reader for torch.save's `data.pkl`. It builds plain values and knows the few
//! callables torch.save writes for tensors (`torch_globals`: the `_rebuild_*` functions, `OrderedDict`, storage classes,
//! dtypes); any other global is refused by name when it is read, so a file cannot make this code run
//! anything. Lists and dicts are plain values, not shared objects: fetching one back from the memo is
//! refused, because it could be a stale copy of an object changed later (torch.save never does this).
use std::collections::HashMap;
use std::rc::Rc;

use super::torch_globals::{call, resolve_global, storage_from_pid};
pub use super::values::{StorageRef, TensorSpec, Value};
use super::values::seq;
#[cfg(test)]
use super::values::MAX_DEPTH;

/// Module and attribute names of the globals torch.save writes are short; this bounds a line read.
const MAX_GLOBAL_LINE: usize = 256;
/// The pickle protocols CPython knows (torch.save writes 2 unless asked otherwise).
const HIGHEST_PROTOCOL: u8 = 5;

mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const BINFLOAT: u8 = b'G';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const BINUNICODE: u8 = b'X';
    pub const EMPTY_LIST: u8 = b']';
    pub const APPEND: u8 = b'a';
    pub const BUILD: u8 = b'b';
    pub const GLOBAL: u8 = b'c';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const PROTO: u8 = 0x80;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
}

/// Interprets a whole pickle and returns the value it stops with.
pub fn unpickle(bytes: &[u8]) -> Result<Value, String> {
    let mut machine = Machine { input: bytes, pos: 0, stack: Vec::new(), marks: Vec::new(), memo: HashMap::new() };
    machine.run()
}

struct Machine<'a> {
    input: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    /// Stack lengths at each MARK.
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
}

impl<'a> Machine<'a> {
    fn run(&mut self) -> Result<Value, String> {
        loop {
            let at = self.pos;
            let code = self.byte()?;
            if code == op::STOP {
                return self.finish();
            }
            self.step(code).map_err(|e| format!("pickle opcode 0x{code:02x} at byte {at}: {e}"))?;
        }
    }

    fn finish(&mut self) -> Result<Value, String> {
        if self.stack.len() != 1 || !self.marks.is_empty() {
            return Err(format!("pickle stops with {} values and {} marks on the stack, not one value", self.stack.len(), self.marks.len()));
        }
        Ok(self.stack.pop().unwrap())
    }

    fn step(&mut self, code: u8) -> Result<(), String> {
        match code {
            op::PROTO => {
                let version = self.byte()?;
                if version > HIGHEST_PROTOCOL {
                    return Err(format!("pickle protocol {version} is unknown"));
                }
            }
            // A frame only tells the length of what follows; the opcodes inside read the same.
            op::FRAME => {
                self.take(8)?;
            }
            op::MARK => self.marks.push(self.stack.len()),
            op::POP => {
                self.pop()?;
            }
            op::POP_MARK => {
                self.pop_mark()?;
            }
            op::NONE => self.stack.push(Value::None),
            op::NEWTRUE => self.stack.push(Value::Bool(true)),
            op::NEWFALSE => self.stack.push(Value::Bool(false)),
            op::BININT => {
                let v = i32::from_le_bytes(self.take(4)?.try_into().unwrap());
                self.stack.push(Value::Int(v.into()));
            }
            op::BININT1 => {
                let v = self.byte()?;
                self.stack.push(Value::Int(v.into()));
            }
            op::BININT2 => {
                let v = u16::from_le_bytes(self.take(2)?.try_into().unwrap());
                self.stack.push(Value::Int(v.into()));
            }
            op::LONG1 => {
                let n = self.byte()? as usize;
                let v = long_from_le(self.take(n)?)?;
                self.stack.push(Value::Int(v));
            }
            op::BINFLOAT => {
                let v = f64::from_be_bytes(self.take(8)?.try_into().unwrap());
                self.stack.push(Value::Float(v));
            }
            op::SHORT_BINUNICODE => {
                let n = self.byte()? as usize;
                self.push_str(n)?;
            }
            op::BINUNICODE => {
                let n = u32::from_le_bytes(self.take(4)?.try_into().unwrap()) as usize;
                self.push_str(n)?;
            }
            op::BINUNICODE8 => {
                let n = u64::from_le_bytes(self.take(8)?.try_into().unwrap());
                self.push_str(usize::try_from(n).map_err(|_| "string length overflows")?)?;
            }
            op::EMPTY_TUPLE => self.stack.push(Value::Tuple(Rc::new(seq(Vec::new())?))),
            op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                let n = usize::from(code - op::TUPLE1 + 1);
                let start = self.stack.len().checked_sub(n).ok_or("stack underflow")?;
                let items = self.stack.split_off(start);
                self.stack.push(Value::Tuple(Rc::new(seq(items)?)));
            }
            op::TUPLE => {
                let items = self.pop_mark()?;
                self.stack.push(Value::Tuple(Rc::new(seq(items)?)));
            }
            op::EMPTY_LIST => self.stack.push(Value::List(seq(Vec::new())?)),
            op::LIST => {
                let items = self.pop_mark()?;
                self.stack.push(Value::List(seq(items)?));
            }
            op::APPEND => {
                let item = self.pop()?;
                self.extend_list(vec![item])?;
            }
            op::APPENDS => {
                let items = self.pop_mark()?;
                self.extend_list(items)?;
            }
            op::EMPTY_DICT => self.stack.push(Value::Dict(seq(Vec::new())?)),
            op::DICT => {
                let items = self.pop_mark()?;
                self.stack.push(Value::Dict(seq(Vec::new())?));
                self.extend_dict(items)?;
            }
            op::SETITEM => {
                let value = self.pop()?;
                let key = self.pop()?;
                self.extend_dict(vec![key, value])?;
            }
            op::SETITEMS => {
                let items = self.pop_mark()?;
                self.extend_dict(items)?;
            }
            op::BINPUT => {
                let index = self.byte()?.into();
                self.memoize(index)?;
            }
            op::LONG_BINPUT => {
                let index = u32::from_le_bytes(self.take(4)?.try_into().unwrap());
                self.memoize(index)?;
            }
            op::MEMOIZE => {
                let index = u32::try_from(self.memo.len()).map_err(|_| "memo overflows")?;
                self.memoize(index)?;
            }
            op::BINGET => {
                let index = self.byte()?.into();
                self.fetch(index)?;
            }
            op::LONG_BINGET => {
                let index = u32::from_le_bytes(self.take(4)?.try_into().unwrap());
                self.fetch(index)?;
            }
            op::GLOBAL => {
                let module = self.line()?;
                let name = self.line()?;
                self.stack.push(Value::Global(resolve_global(module, name)?));
            }
            op::STACK_GLOBAL => {
                let name = self.pop()?;
                let module = self.pop()?;
                let (Value::Str(module), Value::Str(name)) = (module, name) else {
                    return Err("STACK_GLOBAL needs two strings".into());
                };
                self.stack.push(Value::Global(resolve_global(&module, &name)?));
            }
            op::BINPERSID => {
                let pid = self.pop()?;
                self.stack.push(Value::Storage(Rc::new(storage_from_pid(&pid)?)));
            }
            op::REDUCE => {
                let args = self.pop()?;
                let callable = self.pop()?;
                let Value::Global(global) = callable else {
                    return Err(format!("REDUCE calls {}, not a known function", callable.describe()));
                };
                let Value::Tuple(args) = args else {
                    return Err("REDUCE arguments are not a tuple".into());
                };
                self.stack.push(call(global, &args.items)?);
            }
            // Only a state dict's attributes (its `_metadata`) are set this way in tensor files; they are dropped.
            op::BUILD => {
                let state = self.pop()?;
                match (self.stack.last(), &state) {
                    (Some(Value::Dict(_)), Value::Dict(_) | Value::None) => {}
                    (target, _) => {
                        let target = target.map_or("nothing", Value::describe);
                        return Err(format!("BUILD sets {} on {target}; only attributes of a dict are accepted", state.describe()));
                    }
                }
            }
            _ => return Err("opcode not supported by this data-only reader".into()),
        }
        Ok(())
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.input.len()).ok_or("pickle is truncated")?;
        let slice = &self.input[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn line(&mut self) -> Result<&'a str, String> {
        let rest = &self.input[self.pos..];
        let len = rest.iter().take(MAX_GLOBAL_LINE + 1).position(|&b| b == b'\n').ok_or("a global's name is not terminated")?;
        let line = std::str::from_utf8(self.take(len)?).map_err(|_| "a global's name is not UTF-8")?;
        self.take(1)?;
        Ok(line)
    }

    fn push_str(&mut self, len: usize) -> Result<(), String> {
        let text = std::str::from_utf8(self.take(len)?).map_err(|_| "a string is not UTF-8")?;
        self.stack.push(Value::Str(text.into()));
        Ok(())
    }

    fn pop(&mut self) -> Result<Value, String> {
        if self.marks.last().is_some_and(|&mark| mark >= self.stack.len()) {
            return Err("pops past a MARK".into());
        }
        self.stack.pop().ok_or_else(|| "stack underflow".into())
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>, String> {
        let start = self.marks.pop().ok_or("no MARK to pop to")?;
        Ok(self.stack.split_off(start))
    }

    fn memoize(&mut self, index: u32) -> Result<(), String> {
        let top = self.stack.last().ok_or("memoizes an empty stack")?;
        let kept = match top {
            Value::List(_) | Value::Dict(_) => Value::MemoizedContainer,
            other => other.clone(),
        };
        self.memo.insert(index, kept);
        Ok(())
    }

    fn fetch(&mut self, index: u32) -> Result<(), String> {
        match self.memo.get(&index) {
            None => Err(format!("memo entry {index} was never stored")),
            Some(Value::MemoizedContainer) => Err("a list or dict is referenced twice; shared containers are not supported".into()),
            Some(value) => {
                self.stack.push(value.clone());
                Ok(())
            }
        }
    }

    fn extend_list(&mut self, items: Vec<Value>) -> Result<(), String> {
        let Some(Value::List(list)) = self.stack.last_mut() else { return Err("APPEND target is not a list".into()) };
        let mut all = std::mem::take(&mut list.items);
        all.extend(items);
        *list = seq(all)?;
        Ok(())
    }

    fn extend_dict(&mut self, items: Vec<Value>) -> Result<(), String> {
        if items.len() % 2 != 0 {
            return Err("dict items come in an odd number".into());
        }
        let Some(Value::Dict(dict)) = self.stack.last_mut() else { return Err("SETITEM target is not a dict".into()) };
        let mut all = std::mem::take(&mut dict.items);
        all.extend(items);
        *dict = seq(all)?;
        Ok(())
    }
}

/// Python ints as LONG1 writes them: little-endian two's complement, as many bytes as needed.
fn long_from_le(bytes: &[u8]) -> Result<i64, String> {
    if bytes.len() > 8 {
        return Err(format!("an integer of {} bytes does not fit 64 bits", bytes.len()));
    }
    let fill = if bytes.last().is_some_and(|&b| b & 0x80 != 0) { 0xff } else { 0 };
    let mut full = [fill; 8];
    full[..bytes.len()].copy_from_slice(bytes);
    Ok(i64::from_le_bytes(full))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PROTO 2 + body + STOP.
    fn run(body: &[u8]) -> Result<Value, String> {
        let mut bytes = vec![op::PROTO, 2];
        bytes.extend_from_slice(body);
        bytes.push(op::STOP);
        unpickle(&bytes)
    }

    #[test]
    fn long1_is_little_endian_twos_complement() {
        // pickletools: LONG1 of -2**40 is 6 bytes 00 00 00 00 00 ff.
        let Value::Int(v) = run(&[op::LONG1, 6, 0, 0, 0, 0, 0, 0xff]).unwrap() else { panic!() };
        assert_eq!(v, -(1 << 40));
        let Value::Int(v) = run(&[op::LONG1, 2, 0x00, 0x80]).unwrap() else { panic!() };
        assert_eq!(v, -32768);
        assert!(run(&[op::LONG1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1]).unwrap_err().contains("64 bits"));
    }

    #[test]
    fn unknown_globals_are_refused_when_named() {
        let err = run(b"cbuiltins\neval\n").unwrap_err();
        assert!(err.contains("`builtins.eval`"), "{err}");
        let err = run(b"ctorch\nload\n").unwrap_err();
        assert!(err.contains("`torch.load`"), "{err}");
    }

    #[test]
    fn nesting_is_bounded() {
        let mut body = vec![op::EMPTY_TUPLE];
        body.extend(std::iter::repeat_n(op::TUPLE1, MAX_DEPTH as usize - 1));
        assert!(run(&body).is_ok());
        body.push(op::TUPLE1);
        assert!(run(&body).unwrap_err().contains("nested deeper"));
    }

    #[test]
    fn a_memoized_dict_cannot_be_fetched_again() {
        let err = run(&[op::EMPTY_DICT, op::BINPUT, 0, op::BINGET, 0, op::TUPLE2]).unwrap_err();
        assert!(err.contains("referenced twice"), "{err}");
    }

    #[test]
    fn a_memoized_tuple_can() {
        let Value::Tuple(pair) = run(&[op::BININT1, 7, op::TUPLE1, op::BINPUT, 3, op::BINGET, 3, op::TUPLE2]).unwrap() else { panic!() };
        assert_eq!(pair.items.len(), 2);
    }

    #[test]
    fn the_stack_must_end_with_one_value() {
        assert!(run(&[op::NONE, op::NONE]).unwrap_err().contains("2 values"));
        assert!(run(&[op::MARK, op::NONE]).unwrap_err().contains("1 marks"));
        assert!(run(&[op::NONE, op::MARK, op::POP]).unwrap_err().contains("past a MARK"));
    }

    #[test]
    fn truncation_and_unknown_opcodes_are_errors() {
        assert!(unpickle(&[op::PROTO, 2, op::BININT]).unwrap_err().contains("truncated"));
        assert!(unpickle(&[op::PROTO, 2, op::NONE]).unwrap_err().contains("truncated"));
        // INST (protocol 0) would import and call a class.
        assert!(run(b"iposix\nsystem\n").unwrap_err().contains("not supported"));
    }

    #[test]
    fn persistent_id_must_describe_a_storage() {
        let err = run(&[op::BININT1, 1, op::BINPERSID]).unwrap_err();
        assert!(err.contains("not a tuple"), "{err}");
    }
}
