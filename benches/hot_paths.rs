//! Micro-benchmarks for the per-request hot paths: request heads, chunked
//! bodies, JSON normalization, offsets, SSE and base64, log records with
//! their checksum, append-batch frames, and the packed index.
//!
//! `cargo bench --bench hot_paths` measures; `cargo test --all-targets` runs
//! every benchmark once in criterion's test mode so this file cannot rot.

use std::hint::black_box;
use std::time::Duration;

use base64::Engine;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rill::http::chunked::ChunkedDecoder;
use rill::http::parse::{Limits, parse_head};
use rill::log::format::{self, Decoded};
use rill::protocol::{batch, json, offset, sse};
use rill::stream::bitpack::Column;
use rill::stream::codec::{self, Entry};
use rill::stream::{Command, ProducerWrite};

const POST_HEAD: &[u8] = b"POST /v1/stream/orders/eu-west/2024 HTTP/1.1\r\n\
Host: rill.example.com:4437\r\n\
User-Agent: durable-streams-client/1.4.2\r\n\
Content-Type: application/json\r\n\
Content-Length: 1024\r\n\
Producer-Id: checkout-service-7f3a\r\n\
Producer-Epoch: 3\r\n\
Producer-Seq: 184467\r\n\
Connection: keep-alive\r\n\
\r\n";

const GET_HEAD: &[u8] = b"GET /v1/stream/orders/eu-west/2024?offset=0000000000000000_0000000000123456&live=long-poll&cursor=1739212345 HTTP/1.1\r\n\
Host: rill.example.com:4437\r\n\
User-Agent: durable-streams-client/1.4.2\r\n\
Accept: application/json\r\n\
Connection: keep-alive\r\n\
\r\n";

/// A JSON object of about `target` bytes, pretty-printed with whitespace.
fn json_object(target: usize) -> Vec<u8> {
    let mut s = String::from("{\n");
    let mut i = 0;
    while s.len() < target - 64 {
        s.push_str(&format!(
            "  \"field_{i}\" : {{ \"id\" : {i}, \"price\" : 12.5e-1, \"tag\" : \"item \\\"{i}\\\"\", \"ok\" : true }},\n"
        ));
        i += 1;
    }
    s.push_str("  \"tail\" : [ 1, 2, 3, null ]\n}\n");
    s.into_bytes()
}

/// A top-level array of `n` small objects (a batch of `n` messages).
fn json_batch(n: usize) -> Vec<u8> {
    let items: Vec<String> = (0..n)
        .map(|i| format!("{{ \"seq\": {i}, \"event\": \"order.created\", \"amount\": {i}.25 }}"))
        .collect();
    format!("[\n  {}\n]", items.join(",\n  ")).into_bytes()
}

/// `body` framed as HTTP/1.1 chunked transfer coding with `chunk`-byte chunks.
fn chunked(body: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + body.len() / chunk * 8 + 16);
    for piece in body.chunks(chunk) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// About 4 KiB of text with a newline every ~60 bytes (some CRLF).
fn text_payload(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut i = 0;
    while out.len() < len {
        out.extend_from_slice(
            format!("line {i:05}: the quick brown fox jumps over the lazy dog").as_bytes(),
        );
        out.extend_from_slice(if i % 4 == 0 { b"\r\n" } else { b"\n" });
        i += 1;
    }
    out.truncate(len);
    out
}

fn bench_parse_head(c: &mut Criterion) {
    let limits = Limits::default();
    assert!(parse_head(POST_HEAD, &limits).unwrap().is_some());
    assert!(parse_head(GET_HEAD, &limits).unwrap().is_some());

    let mut g = c.benchmark_group("parse_head");
    g.throughput(Throughput::Bytes(POST_HEAD.len() as u64));
    g.bench_function("post_append", |b| {
        b.iter(|| parse_head(black_box(POST_HEAD), black_box(&limits)))
    });
    g.throughput(Throughput::Bytes(GET_HEAD.len() as u64));
    g.bench_function("get_long_poll", |b| {
        b.iter(|| parse_head(black_box(GET_HEAD), black_box(&limits)))
    });
    g.finish();
}

fn bench_chunked(c: &mut Criterion) {
    let body: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    let wire = chunked(&body, 4096);
    let run = |out: &mut Vec<u8>| {
        out.clear();
        let mut dec = ChunkedDecoder::new(64 * 1024 * 1024);
        let n = dec.decode(black_box(&wire), out).unwrap();
        debug_assert!(dec.is_done());
        n
    };
    let mut out = Vec::with_capacity(body.len());
    assert_eq!(run(&mut out), wire.len());
    assert_eq!(out, body);

    let mut g = c.benchmark_group("chunked");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("decode_64k_in_4k_chunks", |b| b.iter(|| run(&mut out)));
    g.finish();
}

fn bench_json(c: &mut Criterion) {
    let object = json_object(1024);
    let batch = json_batch(100);
    let mut out = Vec::with_capacity(batch.len());
    assert_eq!(json::normalize_into(&object, false, &mut out), Ok(1));
    out.clear();
    assert_eq!(json::normalize_into(&batch, false, &mut out), Ok(100));
    let lines = out.clone();

    let mut g = c.benchmark_group("json");
    g.throughput(Throughput::Bytes(object.len() as u64));
    g.bench_function("normalize_object_1k", |b| {
        b.iter(|| {
            out.clear();
            json::normalize_into(black_box(&object), false, &mut out)
        })
    });
    g.throughput(Throughput::Bytes(batch.len() as u64));
    g.bench_function("normalize_batch_100", |b| {
        b.iter(|| {
            out.clear();
            json::normalize_into(black_box(&batch), false, &mut out)
        })
    });
    g.throughput(Throughput::Bytes(lines.len() as u64));
    g.bench_function("render_array_100", |b| {
        b.iter(|| {
            out.clear();
            json::render_array(black_box(&lines), &mut out);
            out.len()
        })
    });
    g.finish();
}

fn bench_offset(c: &mut Criterion) {
    let token = offset::format(123_456_789);
    assert_eq!(
        offset::parse_param(&token),
        Some(offset::OffsetParam::At(123_456_789))
    );

    let mut g = c.benchmark_group("offset");
    g.bench_function("format", |b| {
        b.iter(|| offset::format(black_box(123_456_789)))
    });
    g.bench_function("parse_param", |b| {
        b.iter(|| offset::parse_param(black_box(&token)))
    });
    g.finish();
}

fn bench_sse(c: &mut Criterion) {
    let text = text_payload(4096);
    let binary: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut out = Vec::with_capacity(16 * 1024);

    let mut g = c.benchmark_group("sse");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("write_event_text_4k", |b| {
        b.iter(|| {
            out.clear();
            sse::write_event(&mut out, "data", black_box(&text));
            out.len()
        })
    });
    g.throughput(Throughput::Bytes(binary.len() as u64));
    g.bench_function("base64_4k", |b| {
        b.iter(|| base64::engine::general_purpose::STANDARD.encode(black_box(&binary)))
    });
    g.finish();
}

/// A 256-byte idempotent append as the log stores it: the codec's payload
/// inside a framed record with its xxh3 checksum.
fn bench_record(c: &mut Criterion) {
    let entry = Entry::Stream(Command::Append {
        key: "orders/eu-west-2024".to_string(),
        stream_id: 7,
        start: 123_456_789,
        data: text_payload(256).into(),
        producer: Some(ProducerWrite {
            id: "checkout-service-7f3a".to_string(),
            epoch: 3,
            seq: 184_467,
        }),
        stream_seq: None,
        close: false,
        now_ms: 1_764_547_200_000,
    });
    let encode = |out: &mut Vec<u8>| {
        out.clear();
        format::encode_with(42, out, |out| (codec::encode(black_box(&entry), out), ())).0
    };
    let mut frame = Vec::with_capacity(1024);
    encode(&mut frame);
    let decode = |frame: &[u8]| match format::decode(frame) {
        Decoded::Record { record, .. } => codec::decode(record.kind, record.payload).ok(),
        _ => None,
    };
    assert_eq!(decode(&frame).as_ref(), Some(&entry));

    let mut out = Vec::with_capacity(1024);
    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Bytes(frame.len() as u64));
    g.bench_function("encode_append_256", |b| b.iter(|| encode(&mut out)));
    g.bench_function("decode_append_256", |b| {
        b.iter(|| decode(black_box(&frame)))
    });
    g.finish();
}

/// An append-batch body of 512 frames of 256 bytes (extensions §4).
fn bench_batch(c: &mut Criterion) {
    let payload = text_payload(256);
    let mut body = Vec::with_capacity(512 * 260);
    for _ in 0..512 {
        body.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        body.extend_from_slice(&payload);
    }
    assert_eq!(batch::frames(&body).map(|f| f.len()).ok(), Some(512));

    let mut g = c.benchmark_group("batch");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("frames_512x256", |b| {
        b.iter(|| batch::frames(black_box(&body)).map(|f| f.len()))
    });
    g.finish();
}

/// The index's packed message ends (`stream::bitpack`): a full chunk of
/// appends of 200-263 bytes, read by position and searched by offset.
fn bench_index(c: &mut Criterion) {
    let mut end = 1u64 << 30;
    let ends: Vec<u64> = (0..1024u64)
        .map(|i| {
            end += 200 + (i.wrapping_mul(2_654_435_761) >> 7) % 64;
            end
        })
        .collect();
    let column = Column::pack(&ends).expect("packs");
    let probe = ends[700] - 1;
    let search = |column: &Column| {
        let (mut low, mut high) = (0, column.len());
        while low < high {
            let mid = low + (high - low) / 2;
            match column.get(mid) <= probe {
                true => low = mid + 1,
                false => high = mid,
            }
        }
        low
    };
    assert_eq!(search(&column), 700);

    let mut g = c.benchmark_group("index");
    g.bench_function("packed_get", |b| b.iter(|| column.get(black_box(700))));
    g.bench_function("packed_search_1024", |b| {
        b.iter(|| search(black_box(&column)))
    });
    g.bench_function("pack_1024", |b| b.iter(|| Column::pack(black_box(&ends))));
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300))
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_parse_head, bench_chunked, bench_json, bench_offset, bench_sse,
        bench_record, bench_batch, bench_index
}
criterion_main!(benches);
