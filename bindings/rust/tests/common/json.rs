//! A small JSON reader (std only, no crates): what the tests read back or compare with
//! (trackers' metrics.jsonl, the tokenizer fixtures' corpus.json and expected.json). It
//! panics, naming the position, on text that is not JSON. [`Json::dump`] writes a value back
//! on one line (the fine-tuning tests' JSONL files).

#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    /// The value of `key` in an object (panics when it is missing).
    pub fn get(&self, key: &str) -> &Json {
        self.opt(key).unwrap_or_else(|| panic!("no key {:?} in {:?}", key, self))
    }
    /// The value of `key` in an object, None when it is missing.
    pub fn opt(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(kv) => kv.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => panic!("not an object: {:?}", self),
        }
    }
    pub fn num(&self) -> f64 {
        match self {
            Json::Num(v) => *v,
            _ => panic!("not a number: {:?}", self),
        }
    }
    /// A number that is an integer (exact in f64: the ids of a vocabulary are).
    pub fn int(&self) -> i64 {
        let v = self.num();
        assert!(v.fract() == 0.0 && v.abs() < 9.0e15, "not an integer: {}", v);
        v as i64
    }
    pub fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            _ => panic!("not a string: {:?}", self),
        }
    }
    pub fn arr(&self) -> &[Json] {
        match self {
            Json::Arr(items) => items,
            _ => panic!("not an array: {:?}", self),
        }
    }
    /// An array of integers.
    pub fn ints(&self) -> Vec<i64> {
        self.arr().iter().map(Json::int).collect()
    }
    pub fn entries(&self) -> &[(String, Json)] {
        match self {
            Json::Obj(kv) => kv,
            _ => panic!("not an object: {:?}", self),
        }
    }
    /// The value as JSON text on one line (strings escaped as JSON requires: `"`, `\\` and the
    /// control characters; the rest is written as UTF-8).
    pub fn dump(&self) -> String {
        match self {
            Json::Null => "null".into(),
            Json::Bool(b) => b.to_string(),
            Json::Num(v) => {
                assert!(v.is_finite(), "JSON has no {}", v);
                v.to_string()
            }
            Json::Str(s) => quote(s),
            Json::Arr(items) => format!("[{}]", items.iter().map(Json::dump).collect::<Vec<_>>().join(", ")),
            Json::Obj(kv) => {
                let fields: Vec<String> = kv.iter().map(|(k, v)| format!("{}: {}", quote(k), v.dump())).collect();
                format!("{{{}}}", fields.join(", "))
            }
        }
    }
}

/// `s` as a JSON string literal.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub struct Reader<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    /// The JSON value `text` holds (nothing but whitespace may follow it).
    pub fn parse(text: &'a str) -> Json {
        let mut r = Reader { s: text.as_bytes(), i: 0 };
        let v = r.value();
        r.ws();
        assert_eq!(r.i, r.s.len(), "trailing text after the JSON value: {:?}", text);
        v
    }
    fn ws(&mut self) {
        while self.i < self.s.len() && b" \t\r\n".contains(&self.s[self.i]) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) {
        self.ws();
        assert_eq!(self.s.get(self.i), Some(&c), "expected {:?} at {}", c as char, self.i);
        self.i += 1;
    }
    fn lit(&mut self, word: &str, v: Json) -> Json {
        assert!(self.s[self.i..].starts_with(word.as_bytes()), "bad literal at {}", self.i);
        self.i += word.len();
        v
    }
    fn value(&mut self) -> Json {
        self.ws();
        match self.s[self.i] {
            b'{' => {
                self.i += 1;
                let mut kv = Vec::new();
                self.ws();
                if self.s[self.i] == b'}' {
                    self.i += 1;
                    return Json::Obj(kv);
                }
                loop {
                    self.ws();
                    let k = self.string();
                    self.eat(b':');
                    kv.push((k, self.value()));
                    self.ws();
                    self.i += 1;
                    match self.s[self.i - 1] {
                        b',' => continue,
                        b'}' => return Json::Obj(kv),
                        c => panic!("unexpected {:?} in an object at {}", c as char, self.i - 1),
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s[self.i] == b']' {
                    self.i += 1;
                    return Json::Arr(items);
                }
                loop {
                    items.push(self.value());
                    self.ws();
                    self.i += 1;
                    match self.s[self.i - 1] {
                        b',' => continue,
                        b']' => return Json::Arr(items),
                        c => panic!("unexpected {:?} in an array at {}", c as char, self.i - 1),
                    }
                }
            }
            b'"' => Json::Str(self.string()),
            b'n' => self.lit("null", Json::Null),
            b't' => self.lit("true", Json::Bool(true)),
            b'f' => self.lit("false", Json::Bool(false)),
            _ => {
                let start = self.i;
                while self.i < self.s.len() && b"+-0123456789.eE".contains(&self.s[self.i]) {
                    self.i += 1;
                }
                let t = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                Json::Num(t.parse().unwrap_or_else(|_| panic!("bad number {:?} at {}", t, start)))
            }
        }
    }
    fn hex4(&mut self) -> u32 {
        let hex = std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
        self.i += 4;
        u32::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("bad \\u escape {:?}", hex))
    }
    fn string(&mut self) -> String {
        assert_eq!(self.s[self.i], b'"', "expected a string at {}", self.i);
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let c = self.s[self.i];
            self.i += 1;
            match c {
                b'"' => return String::from_utf8(out).unwrap(),
                b'\\' => {
                    let e = self.s[self.i];
                    self.i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4();
                            let cp = if (0xD800..0xDC00).contains(&hi) && self.s[self.i..].starts_with(b"\\u") {
                                // a surrogate pair (Python's ensure_ascii writes one per code point above U+FFFF)
                                self.i += 2;
                                let lo = self.hex4();
                                assert!((0xDC00..0xE000).contains(&lo), "a lone surrogate escape");
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            char::from_u32(cp).expect("a lone surrogate escape")
                        }
                        _ => panic!("bad escape \\{}", e as char),
                    };
                    let mut b = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut b).as_bytes());
                }
                _ => out.push(c),
            }
        }
    }
}
