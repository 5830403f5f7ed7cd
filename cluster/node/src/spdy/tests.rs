//! Framing, header compression and session tests, with a hand-driven client on an in-memory pipe.

use super::*;
use tokio::io::{DuplexStream, ReadHalf, WriteHalf};

fn hdrs(pairs: &[(&str, &str)]) -> Headers {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn encode_all(frames: &[Frame]) -> Vec<u8> {
    let mut encoder = FrameEncoder::new();
    let mut out = BytesMut::new();
    for frame in frames {
        encoder.encode(frame, &mut out).expect("encodable");
    }
    out.to_vec()
}

async fn decode_all(bytes: &[u8]) -> Result<Vec<Frame>, Error> {
    let mut reader = FrameReader::new(bytes);
    let mut frames = Vec::new();
    while let Some(frame) = reader.read_frame().await? {
        frames.push(frame);
    }
    Ok(frames)
}

fn every_frame() -> Vec<Frame> {
    vec![
        Frame::SynStream {
            stream_id: 1,
            associated_to: 0,
            priority: 3,
            fin: false,
            unidirectional: false,
            headers: hdrs(&[("streamtype", "error"), ("port", "8080")]),
        },
        Frame::SynStream {
            stream_id: 3,
            associated_to: 0,
            priority: 0,
            fin: true,
            unidirectional: true,
            headers: hdrs(&[("streamtype", "stdout"), ("x", "a\0b")]),
        },
        Frame::SynReply {
            stream_id: 1,
            fin: false,
            headers: Headers::new(),
        },
        Frame::Headers {
            stream_id: 3,
            fin: true,
            headers: hdrs(&[("extra", "yes")]),
        },
        Frame::RstStream {
            stream_id: 5,
            status: rst::CANCEL,
        },
        Frame::Settings {
            entries: vec![(0, 7, 1 << 20), (1, 4, 100)],
        },
        Frame::Ping { id: 7 },
        Frame::GoAway {
            last_good_stream_id: 9,
            status: goaway::OK,
        },
        Frame::WindowUpdate {
            stream_id: 0,
            delta: 32768,
        },
        Frame::Data {
            stream_id: 1,
            fin: false,
            data: Bytes::from_static(b"hello"),
        },
        Frame::Data {
            stream_id: 1,
            fin: true,
            data: Bytes::new(),
        },
    ]
}

#[test]
fn the_dictionary_is_spdy3s() {
    let dict = header_dictionary();
    assert_eq!(dict.len(), 1423);
    assert_eq!(adler32(&dict), DICTIONARY_ID);
    assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
}

#[tokio::test]
async fn every_frame_type_round_trips_with_one_compression_context() {
    let frames = every_frame();
    let bytes = encode_all(&frames);
    assert_eq!(decode_all(&bytes).await.expect("decodes"), frames);
}

#[test]
fn later_header_blocks_reuse_the_context() {
    let mut compressor = HeaderCompressor::new();
    let mut decompressor = HeaderDecompressor::new();
    let block = encode_header_block(&hdrs(&[
        ("streamtype", "stdout"),
        ("requestid", "0"),
        ("port", "8080"),
    ]));
    let mut first = BytesMut::new();
    compressor.compress(&block, &mut first).expect("compresses");
    let mut second = BytesMut::new();
    compressor
        .compress(&block, &mut second)
        .expect("compresses");
    assert!(
        second.len() < first.len(),
        "the second block refers back to the first: {} vs {}",
        second.len(),
        first.len()
    );
    assert_eq!(first[..6], [0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2]);
    assert_eq!(decompressor.decompress(&first, 1024).expect("first"), block);
    assert_eq!(
        decompressor.decompress(&second, 1024).expect("second"),
        block
    );
}

#[test]
fn a_zlib_stream_in_pieces_and_without_fdict_decodes() {
    // A peer may send a zlib stream that does not use the dictionary; the header can still be split.
    let mut compressor = HeaderCompressor::new();
    let block = encode_header_block(&hdrs(&[("streamtype", "data")]));
    let mut out = BytesMut::new();
    compressor.compress(&block, &mut out).expect("compresses");
    let mut decompressor = HeaderDecompressor::new();
    assert!(
        decompressor
            .decompress(&out[..1], 1024)
            .expect("part")
            .is_empty()
    );
    assert_eq!(
        decompressor.decompress(&out[1..], 1024).expect("rest"),
        block
    );
}

#[test]
fn a_header_bomb_stops_at_the_limit() {
    // 4 MiB of one repeated byte compresses to a few KiB: a frame well under every frame limit.
    let bomb = hdrs(&[("x", &"a".repeat(4 << 20))]);
    let mut compressed = BytesMut::new();
    HeaderCompressor::new()
        .compress(&encode_header_block(&bomb), &mut compressed)
        .expect("compresses");
    assert!(
        compressed.len() < MAX_FRAME_PAYLOAD / 16,
        "{}",
        compressed.len()
    );
    let error = HeaderDecompressor::new()
        .decompress(&compressed, MAX_HEADER_BLOCK)
        .expect_err("refused");
    assert!(
        error.to_string().contains("larger than 65536 bytes"),
        "{error}"
    );
}

#[tokio::test]
async fn a_header_bomb_in_a_syn_stream_is_a_protocol_error() {
    let frame = Frame::SynStream {
        stream_id: 1,
        associated_to: 0,
        priority: 0,
        fin: false,
        unidirectional: false,
        headers: hdrs(&[("x", &"a".repeat(1 << 20))]),
    };
    let error = decode_all(&encode_all(&[frame]))
        .await
        .expect_err("refused");
    assert!(matches!(error, Error::Headers(_)), "{error}");
}

#[test]
fn a_wrong_dictionary_or_garbage_is_refused_and_poisons_the_context() {
    let mut d = HeaderDecompressor::new();
    let error = d
        .decompress(&[0x78, 0xf9, 0, 0, 0, 1, 0, 0], 1024)
        .expect_err("refused");
    assert!(error.to_string().contains("dictionary"), "{error}");
    assert!(d.decompress(&[], 1024).is_err());
    let error = HeaderDecompressor::new()
        .decompress(b"not zlib at all", 1024)
        .expect_err("refused");
    assert!(error.to_string().contains("not a zlib stream"), "{error}");
}

#[test]
fn malformed_header_blocks_are_refused() {
    assert!(decode_header_block(&[0, 0]).is_err());
    assert!(decode_header_block(&[0, 0, 0, 1, 0, 0, 0, 9, b'a']).is_err());
    let dup = encode_header_block(&hdrs(&[("a", "1"), ("a", "2")]));
    assert!(decode_header_block(&dup).is_err());
    let mut many = Vec::new();
    many.extend_from_slice(&(MAX_HEADERS as u32 + 1).to_be_bytes());
    assert!(decode_header_block(&many).is_err());
    let mut trailing = encode_header_block(&hdrs(&[("a", "1")]));
    trailing.push(0);
    assert!(decode_header_block(&trailing).is_err());
}

#[tokio::test]
async fn truncated_frames_are_errors_and_an_empty_input_is_a_clean_end() {
    let bytes = encode_all(&every_frame());
    assert!(decode_all(&[]).await.expect("empty").is_empty());
    // Every prefix that ends inside a frame is an error (a new context per attempt: the prefix
    // may have cut a header block).
    let mut boundaries = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let len = u32::from_be_bytes([0, bytes[offset + 5], bytes[offset + 6], bytes[offset + 7]]);
        offset += 8 + len as usize;
        boundaries.push(offset);
    }
    for cut in 1..bytes.len() {
        let result = decode_all(&bytes[..cut]).await;
        if boundaries.contains(&cut) {
            assert!(result.is_ok(), "cut at a frame boundary {cut}");
        } else {
            assert!(result.is_err(), "cut at {cut} inside a frame");
        }
    }
}

#[tokio::test]
async fn oversized_and_wrong_version_frames_are_refused() {
    let mut big = vec![0x00, 0x00, 0x00, 0x01, 0x00];
    big.extend_from_slice(&((MAX_FRAME_PAYLOAD as u32 + 1).to_be_bytes()[1..]));
    let error = decode_all(&big).await.expect_err("too large");
    assert!(matches!(error, Error::FrameTooLarge { .. }), "{error}");

    let spdy2_ping = [0x80, 0x02, 0x00, 0x06, 0x00, 0x00, 0x00, 0x04, 0, 0, 0, 1];
    let error = decode_all(&spdy2_ping).await.expect_err("version 2");
    assert!(error.to_string().contains("version 2"), "{error}");

    let bad_ping = [
        0x80, 0x03, 0x00, 0x06, 0x00, 0x00, 0x00, 0x05, 0, 0, 0, 1, 0,
    ];
    assert!(decode_all(&bad_ping).await.is_err());

    let bad_settings = [0x80, 0x03, 0x00, 0x04, 0x00, 0x00, 0x00, 0x04, 0, 0, 0, 9];
    assert!(decode_all(&bad_settings).await.is_err());

    let unknown = [0x80, 0x03, 0x00, 0x42, 0x00, 0x00, 0x00, 0x02, 1, 2];
    assert_eq!(
        decode_all(&unknown).await.expect("ignored"),
        vec![Frame::Unknown { frame_type: 0x42 }]
    );
}

#[test]
fn protocol_negotiation_follows_httpstream_handshake() {
    let server = ["v4.channel.k8s.io", "v3.channel.k8s.io"];
    let mut headers = http::HeaderMap::new();
    let refused = negotiate_protocol(&headers, &server).expect_err("required");
    assert_eq!(refused.status, http::StatusCode::BAD_REQUEST);
    headers.append(
        "x-stream-protocol-version",
        http::HeaderValue::from_static("v5.channel.k8s.io, v3.channel.k8s.io"),
    );
    headers.append(
        "x-stream-protocol-version",
        http::HeaderValue::from_static("v4.channel.k8s.io"),
    );
    // The client's order decides.
    assert_eq!(
        negotiate_protocol(&headers, &server).expect("agreed"),
        "v3.channel.k8s.io"
    );
    let mut other = http::HeaderMap::new();
    other.insert(
        "x-stream-protocol-version",
        http::HeaderValue::from_static("v9"),
    );
    let refused = negotiate_protocol(&other, &server).expect_err("none");
    assert_eq!(refused.status, http::StatusCode::FORBIDDEN);
    assert_eq!(refused.accepted, server);
    assert!(refused.message.contains("client supports [v9]"));

    let mut upgrade = http::HeaderMap::new();
    upgrade.insert("connection", http::HeaderValue::from_static("Upgrade"));
    upgrade.insert("upgrade", http::HeaderValue::from_static("SPDY/3.1"));
    assert!(is_spdy_upgrade(&upgrade));
    upgrade.insert("upgrade", http::HeaderValue::from_static("websocket"));
    assert!(!is_spdy_upgrade(&upgrade));
}

// ---------------------------------------------------------------------------------------------
// Sessions.

struct Client {
    reader: FrameReader<ReadHalf<DuplexStream>>,
    writer: WriteHalf<DuplexStream>,
    encoder: FrameEncoder,
}

impl Client {
    async fn send(&mut self, frame: Frame) {
        let mut out = BytesMut::new();
        self.encoder.encode(&frame, &mut out).expect("encodable");
        self.writer.write_all(&out).await.expect("written");
    }

    async fn recv(&mut self) -> Option<Frame> {
        self.reader.read_frame().await.expect("a valid frame")
    }

    async fn open(&mut self, id: u32, headers: &[(&str, &str)]) {
        self.send(Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            fin: false,
            unidirectional: false,
            headers: hdrs(headers),
        })
        .await;
    }

    async fn data(&mut self, id: u32, data: &[u8], fin: bool) {
        self.send(Frame::Data {
            stream_id: id,
            fin,
            data: Bytes::copy_from_slice(data),
        })
        .await;
    }
}

fn pair() -> (Connection, Client) {
    let (client, server) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(client);
    (
        Connection::new(server),
        Client {
            reader: FrameReader::new(read),
            writer: write,
            encoder: FrameEncoder::new(),
        },
    )
}

#[tokio::test]
async fn a_stream_is_accepted_and_carries_data_both_ways() {
    let (mut conn, mut client) = pair();
    client.open(1, &[("streamtype", "stdin")]).await;
    let incoming = conn.accept().await.expect("a stream");
    assert_eq!(incoming.header("StreamType"), Some("stdin"));
    let mut stream = incoming.accept();
    assert_eq!(
        client.recv().await,
        Some(Frame::SynReply {
            stream_id: 1,
            fin: false,
            headers: Headers::new()
        })
    );
    client.data(1, b"hello ", false).await;
    client.data(1, b"world", true).await;
    let mut got = String::new();
    stream.read_to_string(&mut got).await.expect("read");
    assert_eq!(got, "hello world");

    stream.write_all(b"out").await.expect("written");
    stream.shutdown().await.expect("fin");
    assert_eq!(
        client.recv().await,
        Some(Frame::Data {
            stream_id: 1,
            fin: false,
            data: Bytes::from_static(b"out")
        })
    );
    assert_eq!(
        client.recv().await,
        Some(Frame::Data {
            stream_id: 1,
            fin: true,
            data: Bytes::new()
        })
    );
    drop(stream);
    conn.close(Duration::from_secs(5)).await;
    assert_eq!(
        client.recv().await,
        Some(Frame::GoAway {
            last_good_stream_id: 1,
            status: goaway::OK
        })
    );
    assert_eq!(client.recv().await, None, "the transport is closed");
}

#[tokio::test]
async fn pings_are_answered_and_refused_streams_are_reset() {
    let (mut conn, mut client) = pair();
    client.send(Frame::Ping { id: 1 }).await;
    assert_eq!(client.recv().await, Some(Frame::Ping { id: 1 }));
    client.open(1, &[("streamtype", "bogus")]).await;
    drop(conn.accept().await.expect("a stream"));
    assert_eq!(
        client.recv().await,
        Some(Frame::RstStream {
            stream_id: 1,
            status: rst::CANCEL
        })
    );
    // Data for the reset stream is dropped, not answered.
    client.data(1, b"late", true).await;
    client.send(Frame::Ping { id: 3 }).await;
    assert_eq!(client.recv().await, Some(Frame::Ping { id: 3 }));
}

#[tokio::test]
async fn stream_ids_that_go_backwards_or_are_even_end_the_connection() {
    for ids in [[3u32, 1], [1, 2]] {
        let (mut conn, mut client) = pair();
        client.open(ids[0], &[]).await;
        let _first = conn.accept().await.expect("a stream");
        client.open(ids[1], &[]).await;
        assert_eq!(
            client.recv().await,
            Some(Frame::GoAway {
                last_good_stream_id: ids[0],
                status: goaway::PROTOCOL_ERROR
            })
        );
        assert!(conn.accept().await.is_none());
    }
}

#[tokio::test]
async fn a_garbage_header_block_ends_the_connection_with_goaway() {
    let (mut conn, mut client) = pair();
    let mut frame = BytesMut::new();
    control(
        &mut frame,
        TYPE_SYN_STREAM,
        0,
        &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x78, 0xf9, 1, 2, 3, 4, 5],
    )
    .expect("encodable");
    client.writer.write_all(&frame).await.expect("written");
    assert_eq!(
        client.recv().await,
        Some(Frame::GoAway {
            last_good_stream_id: 0,
            status: goaway::PROTOCOL_ERROR
        })
    );
    assert!(conn.accept().await.is_none());
}

#[tokio::test]
async fn streams_beyond_the_limit_are_refused() {
    let (mut conn, mut client) = pair();
    let mut held = Vec::new();
    for i in 0..MAX_STREAMS as u32 {
        client.open(2 * i + 1, &[]).await;
        held.push(conn.accept().await.expect("a stream").accept());
    }
    for _ in 0..MAX_STREAMS {
        assert!(matches!(client.recv().await, Some(Frame::SynReply { .. })));
    }
    let next = 2 * MAX_STREAMS as u32 + 1;
    client.open(next, &[]).await;
    assert_eq!(
        client.recv().await,
        Some(Frame::RstStream {
            stream_id: next,
            status: rst::REFUSED_STREAM
        })
    );
}

#[tokio::test]
async fn a_peer_that_takes_part_in_flow_control_gets_no_more_than_its_window() {
    let (mut conn, mut client) = pair();
    client
        .send(Frame::Settings {
            entries: vec![(0, SETTINGS_INITIAL_WINDOW_SIZE, 10)],
        })
        .await;
    client.open(1, &[]).await;
    let mut stream = conn.accept().await.expect("a stream").accept();
    assert!(matches!(client.recv().await, Some(Frame::SynReply { .. })));
    let writer = tokio::spawn(async move {
        stream.write_all(&[7u8; 25]).await.expect("written");
        stream
    });
    assert_eq!(
        client.recv().await,
        Some(Frame::Data {
            stream_id: 1,
            fin: false,
            data: Bytes::from(vec![7u8; 10])
        })
    );
    // The window is used up: the next frame is the answer to this PING, not more data.
    client.send(Frame::Ping { id: 5 }).await;
    assert_eq!(client.recv().await, Some(Frame::Ping { id: 5 }));
    client
        .send(Frame::WindowUpdate {
            stream_id: 1,
            delta: 100,
        })
        .await;
    assert_eq!(
        client.recv().await,
        Some(Frame::Data {
            stream_id: 1,
            fin: false,
            data: Bytes::from(vec![7u8; 15])
        })
    );
    let _stream = writer.await.expect("writer");
}

#[tokio::test]
async fn a_peer_without_flow_control_gets_everything() {
    // moby/spdystream (kubectl) never sends WINDOW_UPDATE: 200 KiB must still arrive.
    let (mut conn, mut client) = pair();
    client.open(1, &[]).await;
    let mut stream = conn.accept().await.expect("a stream").accept();
    assert!(matches!(client.recv().await, Some(Frame::SynReply { .. })));
    let writer = tokio::spawn(async move {
        stream
            .write_all(&vec![1u8; 200 * 1024])
            .await
            .expect("written");
        stream.shutdown().await.expect("fin");
        stream
    });
    let mut total = 0;
    loop {
        match client.recv().await {
            Some(Frame::Data { data, fin, .. }) => {
                assert!(data.len() <= MAX_WRITE_CHUNK);
                total += data.len();
                if fin {
                    break;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(total, 200 * 1024);
    let _stream = writer.await.expect("writer");
}

#[tokio::test]
async fn reading_reopens_the_peers_windows_and_unread_data_is_bounded() {
    let (mut conn, mut client) = pair();
    client.open(1, &[]).await;
    let mut stream = conn.accept().await.expect("a stream").accept();
    assert!(matches!(client.recv().await, Some(Frame::SynReply { .. })));
    // Three frames of 30 KiB: more than a window. The third waits until the stream is read.
    for _ in 0..3 {
        client.data(1, &[9u8; 30 * 1024], false).await;
    }
    let mut buf = vec![0u8; 90 * 1024];
    stream.read_exact(&mut buf).await.expect("all three frames");
    let mut stream_delta = 0;
    let mut conn_delta = 0;
    while stream_delta < 60 * 1024 || conn_delta < 60 * 1024 {
        match client.recv().await {
            Some(Frame::WindowUpdate {
                stream_id: 1,
                delta,
            }) => stream_delta += delta,
            Some(Frame::WindowUpdate {
                stream_id: 0,
                delta,
            }) => conn_delta += delta,
            other => panic!("unexpected {other:?}"),
        }
    }
    let state = conn.shared.lock();
    assert_eq!(state.streams.get(&1).map(|s| s.recv_len), Some(0));
}

#[tokio::test]
async fn a_frame_past_the_window_waits_for_the_reader() {
    let (mut conn, mut client) = pair();
    client.open(1, &[]).await;
    let mut stream = conn.accept().await.expect("a stream").accept();
    assert!(matches!(client.recv().await, Some(Frame::SynReply { .. })));
    client.data(1, &[1u8; 60 * 1024], false).await;
    client.data(1, &[2u8; 60 * 1024], false).await;
    client.send(Frame::Ping { id: 9 }).await;
    // The PING behind the second frame is answered only once the stream has been read.
    let mut first = vec![0u8; 60 * 1024];
    stream.read_exact(&mut first).await.expect("first frame");
    loop {
        match client.recv().await {
            Some(Frame::Ping { id: 9 }) => break,
            Some(Frame::WindowUpdate { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let buffered = conn.shared.lock().streams.get(&1).map(|s| s.recv_len);
    assert_eq!(buffered, Some(60 * 1024));
}

#[tokio::test]
async fn the_peer_closing_ends_unfinished_streams_with_an_error() {
    let (mut conn, client) = pair();
    let mut client = client;
    client.open(1, &[]).await;
    let mut stream = conn.accept().await.expect("a stream").accept();
    drop(client);
    let mut buf = [0u8; 4];
    let error = stream.read(&mut buf).await.expect_err("reset");
    assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
    assert!(conn.accept().await.is_none());
}

// ---------------------------------------------------------------------------------------------
// The Kubernetes protocols.

use super::protocols::{
    ExecProtocol, STREAM_CREATION_TIMEOUT, Wanted, serve_port_forward, wait_for_exec_streams,
    write_status,
};

async fn replies(client: &mut Client, n: usize) {
    for _ in 0..n {
        assert!(matches!(client.recv().await, Some(Frame::SynReply { .. })));
    }
}

#[tokio::test]
async fn exec_streams_are_taken_by_type_and_the_v4_status_ends_the_error_stream() {
    let (mut conn, mut client) = pair();
    client.open(1, &[("streamtype", "error")]).await;
    client.open(3, &[("streamtype", "stdout")]).await;
    client.open(5, &[("streamtype", "surprise")]).await;
    client.open(7, &[("streamtype", "stderr")]).await;
    let wanted = Wanted {
        stdout: true,
        stderr: true,
        ..Wanted::default()
    };
    let mut streams =
        wait_for_exec_streams(&mut conn, ExecProtocol::V4, wanted, STREAM_CREATION_TIMEOUT)
            .await
            .expect("all streams");
    assert_eq!(streams.stdout.as_ref().map(Stream::id), Some(3));
    assert_eq!(streams.stderr.as_ref().map(Stream::id), Some(7));
    assert!(streams.stdin.is_none() && streams.resize.is_none());
    let mut error = streams.error.take().expect("error stream");
    write_status(
        &mut error,
        ExecProtocol::V4,
        br#"{"status":"Success"}"#,
        None,
    )
    .await;
    let mut seen = Vec::new();
    while seen.len() < 7 {
        match client.recv().await {
            Some(Frame::SynReply { stream_id, .. }) => seen.push(format!("reply {stream_id}")),
            Some(Frame::Data {
                stream_id: 5,
                fin: true,
                ..
            }) => seen.push("fin 5".into()),
            Some(Frame::Data {
                stream_id: 1,
                fin: false,
                data,
            }) => {
                assert_eq!(&data[..], br#"{"status":"Success"}"#);
                seen.push("status".into());
            }
            Some(Frame::Data {
                stream_id: 1,
                fin: true,
                ..
            }) => seen.push("fin 1".into()),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen[..3], ["reply 1", "reply 3", "reply 5"]);
    assert!(
        seen.ends_with(&["status".to_string(), "fin 1".to_string()]),
        "{seen:?}"
    );
}

#[tokio::test]
async fn older_exec_protocols_write_only_failures_as_text() {
    let (mut conn, mut client) = pair();
    client.open(1, &[("streamtype", "error")]).await;
    let wanted = Wanted {
        stdout: false,
        ..Wanted::default()
    };
    let mut streams =
        wait_for_exec_streams(&mut conn, ExecProtocol::V2, wanted, STREAM_CREATION_TIMEOUT)
            .await
            .expect("the error stream");
    let mut error = streams.error.take().expect("error stream");
    write_status(
        &mut error,
        ExecProtocol::V2,
        b"{}",
        Some("command terminated"),
    )
    .await;
    replies(&mut client, 1).await;
    assert_eq!(
        client.recv().await,
        Some(Frame::Data {
            stream_id: 1,
            fin: false,
            data: Bytes::from_static(b"command terminated")
        })
    );
}

#[tokio::test(start_paused = true)]
async fn exec_streams_that_never_come_time_out() {
    let (mut conn, mut client) = pair();
    client.open(1, &[("streamtype", "error")]).await;
    let wanted = Wanted {
        stdin: true,
        ..Wanted::default()
    };
    let error = wait_for_exec_streams(&mut conn, ExecProtocol::V4, wanted, STREAM_CREATION_TIMEOUT)
        .await
        .err()
        .expect("timed out");
    assert_eq!(error, "timed out waiting for client to create streams");
}

async fn echo_server() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let task = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = socket.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (port, task)
}

async fn dial_local(port: u16) -> io::Result<tokio::net::TcpStream> {
    tokio::net::TcpStream::connect(("127.0.0.1", port)).await
}

#[tokio::test]
async fn port_forward_connects_each_pair_to_the_pods_port() {
    let (port, _server) = echo_server().await;
    let (conn, mut client) = pair();
    let serving = tokio::spawn(serve_port_forward(conn, "default/p".into(), dial_local));
    let p = port.to_string();
    client
        .open(
            1,
            &[("streamtype", "error"), ("port", &p), ("requestid", "0")],
        )
        .await;
    client.data(1, b"", true).await;
    client
        .open(
            3,
            &[("streamtype", "data"), ("port", &p), ("requestid", "0")],
        )
        .await;
    replies(&mut client, 2).await;
    client.data(3, b"ping through the pod", true).await;
    let mut echoed = Vec::new();
    let mut fins = Vec::new();
    while fins.len() < 2 {
        match client.recv().await {
            Some(Frame::Data {
                stream_id: 3,
                data,
                fin,
            }) => {
                echoed.extend_from_slice(&data);
                if fin {
                    fins.push(3);
                }
            }
            Some(Frame::Data {
                stream_id: 1,
                data,
                fin: true,
            }) if data.is_empty() => fins.push(1),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(echoed, b"ping through the pod");
    assert_eq!(fins, [3, 1], "the data stream ends before the error stream");
    drop(client);
    serving.await.expect("the server ends with the connection");
}

#[tokio::test]
async fn port_forward_reports_a_refused_dial_and_refuses_bad_streams() {
    // A port nothing listens on: bind one, learn its number, close it.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let (conn, mut client) = pair();
    let _serving = tokio::spawn(serve_port_forward(conn, "default/p".into(), dial_local));
    client.open(1, &[("streamtype", "data")]).await;
    assert_eq!(
        client.recv().await,
        Some(Frame::RstStream {
            stream_id: 1,
            status: rst::CANCEL
        })
    );
    client
        .open(3, &[("streamtype", "junk"), ("port", "80")])
        .await;
    assert_eq!(
        client.recv().await,
        Some(Frame::RstStream {
            stream_id: 3,
            status: rst::CANCEL
        })
    );
    let p = port.to_string();
    // No requestID: the kubelet pairs error stream N with data stream N + 2.
    client
        .open(5, &[("streamtype", "error"), ("port", &p)])
        .await;
    client
        .open(7, &[("streamtype", "data"), ("port", &p)])
        .await;
    replies(&mut client, 2).await;
    let mut message = Vec::new();
    loop {
        match client.recv().await {
            Some(Frame::Data {
                stream_id: 5,
                data,
                fin,
            }) => {
                message.extend_from_slice(&data);
                if fin {
                    break;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let message = String::from_utf8(message).expect("text");
    assert!(
        message.starts_with(&format!("error forwarding port {port} to pod default/p: ")),
        "{message}"
    );
}

#[tokio::test]
async fn data_for_a_dropped_stream_is_discarded_and_reopens_the_connection_window() {
    let (mut conn, mut client) = pair();
    client.open(1, &[]).await;
    drop(conn.accept().await.expect("a stream").accept());
    replies(&mut client, 1).await;
    assert_eq!(
        client.recv().await,
        Some(Frame::Data {
            stream_id: 1,
            fin: true,
            data: Bytes::new()
        })
    );
    client.data(1, &[5u8; 40 * 1024], false).await;
    assert_eq!(
        client.recv().await,
        Some(Frame::WindowUpdate {
            stream_id: 0,
            delta: 40 * 1024
        })
    );
    assert_eq!(
        conn.shared.lock().streams.get(&1).map(|s| s.recv_len),
        Some(0)
    );
}

#[test]
fn blocks_compressed_by_zlib_with_the_dictionary_decode() {
    // Two header blocks as zlib 1.x (CPython's `zlib.compressobj(9, zdict=<SPDY/3 dictionary>)`,
    // each ended with Z_SYNC_FLUSH) writes them: the second refers back into the first.
    let unhex = |s: &str| -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    };
    let first = unhex("78f9e3c6a7c202253a2c850917c215d8cb571e646b31720c6305000000ffff");
    let second = unhex("a295b900000000ffff");
    let expected = hdrs(&[
        ("content-type", "text/plain"),
        ("accept-encoding", "gzip,deflate"),
        ("user-agent", "x"),
    ]);
    let mut d = HeaderDecompressor::new();
    for block in [first, second] {
        let headers = decode_header_block(&d.decompress(&block, 4096).expect("inflates"))
            .expect("a header block");
        assert_eq!(headers, expected);
    }
}
