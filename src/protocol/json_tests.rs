//! Unit tests of JSON mode body handling (`json.rs`).
use super::*;

fn norm(body: &[u8], allow_empty: bool) -> Result<(usize, Vec<u8>), JsonError> {
    let mut out = Vec::new();
    normalize_into(body, allow_empty, &mut out).map(|n| (n, out))
}

fn ok(body: &str) -> (usize, String) {
    let (n, out) = norm(body.as_bytes(), false).expect("valid JSON");
    (n, String::from_utf8(out).expect("utf-8"))
}

fn is_invalid(body: &[u8]) -> bool {
    matches!(norm(body, true), Err(JsonError::Invalid { .. }))
}

#[test]
fn flattening_examples() {
    assert_eq!(ok(r#"{"a":1}"#), (1, "{\"a\":1}\n".to_string()));
    assert_eq!(
        ok(r#"[{"a":1},{"b":2}]"#),
        (2, "{\"a\":1}\n{\"b\":2}\n".to_string())
    );
    assert_eq!(ok("[[1,2],[3,4]]"), (2, "[1,2]\n[3,4]\n".to_string()));
    assert_eq!(ok("[[[1,2,3]]]"), (1, "[[1,2,3]]\n".to_string()));
}

#[test]
fn minifies_outside_strings_only() {
    let body = " \r\n\t{ \"a b\" : [ 1 , \" x  y \\t \" , { } , [ ] ] , \"c\":null }\n";
    assert_eq!(
        ok(body),
        (
            1,
            "{\"a b\":[1,\" x  y \\t \",{},[]],\"c\":null}\n".to_string()
        )
    );
    assert_eq!(ok(" [ 1 ,\n 2 ] "), (2, "1\n2\n".to_string()));
}

#[test]
fn lexemes_are_byte_exact() {
    assert_eq!(ok("1.0e+10"), (1, "1.0e+10\n".to_string()));
    assert_eq!(ok("-0"), (1, "-0\n".to_string()));
    assert_eq!(
        ok("[1E-5, 0.000, -12.50e3]"),
        (3, "1E-5\n0.000\n-12.50e3\n".to_string())
    );
    let (_, out) = ok(r#""\u00e9""#);
    assert_eq!(out, "\"\\u00e9\"\n");
    assert_eq!(out.len(), 9);
    assert_eq!(
        ok(r#"["\"\\\/\b\f\n\r\t", "é😀"]"#),
        (2, "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"\n\"é😀\"\n".to_string())
    );
}

#[test]
fn top_level_scalars_are_one_message() {
    assert_eq!(ok(r#""x""#), (1, "\"x\"\n".to_string()));
    assert_eq!(ok("1"), (1, "1\n".to_string()));
    assert_eq!(ok("null"), (1, "null\n".to_string()));
    assert_eq!(ok(" true "), (1, "true\n".to_string()));
    assert_eq!(ok("[false]"), (1, "false\n".to_string()));
}

#[test]
fn empty_array_depends_on_flag() {
    for body in ["[]", "[ ]", " [\n\t] "] {
        assert_eq!(norm(body.as_bytes(), true), Ok((0, Vec::new())));
        assert_eq!(norm(body.as_bytes(), false), Err(JsonError::EmptyArray));
    }
    assert!(is_invalid(b"[] x"));
    assert_eq!(ok("[[]]"), (1, "[]\n".to_string()));
}

#[test]
fn rejects_invalid_inputs() {
    let cases: &[&[u8]] = &[
        b"",
        b" \n\t\r ",
        b"[1,2,]",
        b"[1,]",
        b"[,1]",
        b"{\"a\":1,}",
        b"{'a':1}",
        b"'x'",
        b"NaN",
        b"-Infinity",
        b"01",
        b"-01",
        b"1.",
        b"1.e5",
        b".5",
        b"1e",
        b"1e+",
        b"+1",
        b"-",
        b"\"abc",
        b"\"abc\\",
        b"\"\\x\"",
        b"\"\\u12G4\"",
        b"\"\\u12\"",
        b"\"a\x01b\"",
        b"\"a\nb\"",
        b"\"\xff\"",
        b"\"\xc3\"",
        b"\"\xed\xa0\x80\"",
        b"{} {}",
        b"1 2",
        b"[1] [2]",
        b"\xEF\xBB\xBF{}",
        b"tru",
        b"truex",
        b"nul",
        b"{\"a\"}",
        b"{\"a\" 1}",
        b"{1:2}",
        b"[1 2]",
        b"[",
        b"{",
        b"]",
        b"}",
        b"[1}",
        b"{\"a\":1]",
    ];
    for case in cases {
        assert!(
            is_invalid(case),
            "accepted {:?}",
            String::from_utf8_lossy(case)
        );
    }
}

#[test]
fn lone_surrogate_escapes_are_accepted() {
    assert_eq!(ok(r#""\ud800""#), (1, "\"\\ud800\"\n".to_string()));
}

#[test]
fn error_positions_and_messages() {
    assert_eq!(
        norm(b"[1,]", true),
        Err(JsonError::Invalid {
            position: 3,
            reason: "expected a JSON value"
        })
    );
    let message = norm(b"01", true).unwrap_err().message();
    assert!(message.contains("byte 1"), "{message}");
    assert!(!JsonError::TooDeep.message().is_empty());
    assert!(!JsonError::EmptyArray.to_string().is_empty());
}

#[test]
fn deep_nesting_is_rejected_without_crashing() {
    let deep = "[".repeat(10_000);
    assert_eq!(norm(deep.as_bytes(), true), Err(JsonError::TooDeep));
    let closed = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(norm(closed.as_bytes(), true), Err(JsonError::TooDeep));
    let objects = "{\"a\":".repeat(10_000);
    assert_eq!(norm(objects.as_bytes(), true), Err(JsonError::TooDeep));
}

#[test]
fn depth_limit_is_exact() {
    let at_limit = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
    assert!(norm(at_limit.as_bytes(), true).is_ok());
    let over = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
    assert_eq!(norm(over.as_bytes(), true), Err(JsonError::TooDeep));
}

#[test]
fn errors_leave_out_untouched() {
    let mut out = b"prefix\n".to_vec();
    assert!(normalize_into(b"[1, 2, {\"a\": tru}]", true, &mut out).is_err());
    assert_eq!(out, b"prefix\n");
    assert_eq!(
        normalize_into(b"[]", false, &mut out),
        Err(JsonError::EmptyArray)
    );
    assert_eq!(out, b"prefix\n");
    assert_eq!(normalize_into(b"[1, 2]", false, &mut out), Ok(2));
    assert_eq!(out, b"prefix\n1\n2\n");
}

#[test]
fn steps_of_any_size_give_what_one_pass_gives() {
    let bodies: [&[u8]; 10] = [
        b"[1,2,3]",
        b" [ 1 , \"x\" , {\"a\": [1, 2]} ] ",
        b"{\"a\":[1,2],\"b\":{\"c\":null}}",
        b"[[1,[2]],[3]]",
        b"[]",
        b"7",
        b"[1,]",
        b"[1 2]",
        b"[1]x",
        b"\xEF\xBB\xBF[1]",
    ];
    for body in bodies {
        let mut whole = b"prefix\n".to_vec();
        let expected = normalize_into(body, true, &mut whole);
        for size in [1, 2, 5, usize::MAX] {
            let mut out = b"prefix\n".to_vec();
            let mut steps = Normalizing::new(body, &mut out);
            let outcome = loop {
                if let Some(outcome) = steps.step(size) {
                    break outcome;
                }
            };
            assert_eq!(outcome, expected, "{body:?} in steps of {size}");
            assert_eq!(out, whole, "{body:?} in steps of {size}");
        }
    }
}

#[test]
fn render_array_and_messages() {
    let mut out = Vec::new();
    render_array(b"", &mut out);
    assert_eq!(out, b"[]");
    out.clear();
    render_array(b"{\"a\":1}\n[1,2]\n", &mut out);
    assert_eq!(out, b"[{\"a\":1},[1,2]]");
    let all: Vec<&[u8]> = messages(b"1\n\"x\"\n").collect();
    assert_eq!(all, vec![&b"1"[..], &b"\"x\""[..]]);
    assert_eq!(messages(b"").count(), 0);
}

/// Tiny deterministic PRNG (xorshift64*) for the property-style tests.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> usize {
        usize::try_from(self.next() % n).unwrap_or(0)
    }

    fn pick<'b>(&mut self, items: &[&'b str]) -> &'b str {
        items[self.below(items.len() as u64)]
    }
}

fn ws(rng: &mut Rng, s: &mut String) {
    let w = rng.pick(&["", "", " ", "\n", "\t ", "\r\n  "]);
    s.push_str(w);
}

fn gen_value(rng: &mut Rng, depth: usize, s: &mut String) {
    let kind = if depth > 4 {
        rng.below(3)
    } else {
        rng.below(5)
    };
    match kind {
        0 => s.push_str(rng.pick(&["0", "-0", "1.0e+10", "12", "-3.25E-2", "7e0"])),
        1 => s.push_str(rng.pick(&[
            "\"\"",
            "\" a  b \"",
            "\"\\u00e9\\n\"",
            "\"é😀\"",
            "\"\\ud800\"",
        ])),
        2 => s.push_str(rng.pick(&["true", "false", "null"])),
        3 => gen_container(rng, depth, s, false),
        _ => gen_container(rng, depth, s, true),
    }
}

fn gen_container(rng: &mut Rng, depth: usize, s: &mut String, object: bool) {
    s.push(if object { '{' } else { '[' });
    for i in 0..rng.below(4) {
        if i > 0 {
            ws(rng, s);
            s.push(',');
        }
        ws(rng, s);
        if object {
            s.push_str(rng.pick(&["\"k\"", "\"a b\"", "\"\\\"\""]));
            ws(rng, s);
            s.push(':');
            ws(rng, s);
        }
        gen_value(rng, depth + 1, s);
    }
    ws(rng, s);
    s.push(if object { '}' } else { ']' });
}

fn gen_document(rng: &mut Rng) -> String {
    let mut s = String::new();
    ws(rng, &mut s);
    gen_value(rng, 0, &mut s);
    ws(rng, &mut s);
    s
}

#[test]
fn normalizing_normalized_output_is_identity() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..2_000 {
        let doc = gen_document(&mut rng);
        let (count, lines) = norm(doc.as_bytes(), true).expect("generated JSON is valid");
        assert_eq!(messages(&lines).count(), count);
        let mut array = Vec::new();
        render_array(&lines, &mut array);
        let (again_count, again) = norm(&array, true).expect("rendered array is valid");
        assert_eq!((again_count, &again), (count, &lines), "doc {doc:?}");
        for message in messages(&lines) {
            if message.first() != Some(&b'[') {
                let mut line = message.to_vec();
                line.push(b'\n');
                assert_eq!(norm(message, true), Ok((1, line)));
            }
        }
    }
}

#[test]
fn mutated_inputs_never_panic_and_keep_out_intact() {
    let mut rng = Rng(0x0123_4567_89AB_CDEF);
    let alphabet = b"[]{}\",:\\u0123456789eE+-. \ntrufalsn\xff\xc3\x01";
    for _ in 0..5_000 {
        let mut bytes = gen_document(&mut rng).into_bytes();
        for _ in 0..=rng.below(3) {
            let at = rng.below(bytes.len() as u64 + 1);
            match rng.below(3) {
                0 if at < bytes.len() => {
                    bytes.remove(at);
                }
                1 if at < bytes.len() => bytes[at] = alphabet[rng.below(alphabet.len() as u64)],
                _ => bytes.insert(at, alphabet[rng.below(alphabet.len() as u64)]),
            }
        }
        let mut out = b"keep".to_vec();
        if normalize_into(&bytes, rng.below(2) == 0, &mut out).is_err() {
            assert_eq!(out, b"keep");
        }
    }
}
