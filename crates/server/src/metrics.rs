//! Metrics for operators (`--metricsAddr HOST:PORT`): an HTTP listener whose `GET /metrics`
//! answers Prometheus' text format, on nodes and routers alike, as FerretDB serves its metrics
//! on its debug address.
//!
//! One source, no second set of counters: each scrape runs `serverStatus` through the
//! process's own command service (a node's or a router's, as a client would see it) and turns
//! the reply into samples:
//! - every number of the document (booleans as 0 or 1) is a gauge named after its path,
//!   `myriad_<section>_<field>...` (e.g. `myriad_connections_current`,
//!   `myriad_opcounters_insert`, `myriad_myriad_blockCache_usageBytes`);
//! - the per-command counters `metrics.commands.<name>.{total,failed}` are one family with a
//!   `command` label (`myriad_metrics_commands_total{command="find"}`), and `opLatencies`'
//!   `{reads,writes,commands,transactions}.{latency,ops}` one family with a `kind` label;
//! - `opLatencies`' histograms (serverStatus with `opLatencies: {histograms: true}`) one
//!   Prometheus histogram, `myriad_op_latencies_microseconds{kind}`: mongod's buckets, each
//!   bucket's `le` the next one's lower bound (the last `+Inf`), counts cumulated, `_sum` the
//!   kind's total latency and `_count` its operations.
//!
//! Bounds: the walk descends at most [`MAX_DEPTH`] documents deep and skips arrays; a scrape
//! is one serverStatus (bounded by that command's own limits). The listener binds only the
//! address given.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bson::{doc, Bson, Document};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use myriad_commands::{CommandRequest, ConnectionInfo, ServerContext};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;

use crate::network::Service;

/// How deep the walk of serverStatus goes.
const MAX_DEPTH: usize = 8;
/// The connection id of scrapes' serverStatus (never a client's: those start at 1).
const SCRAPE_CONNECTION_ID: i64 = 0;

type Labels = Vec<(String, String)>;
type GaugeFamily = Family<Labels, Gauge<f64, AtomicU64>>;

/// Binds `address` and serves scrapes until the process ends.
pub async fn serve(address: &str, context: Arc<ServerContext>, service: Arc<dyn Service>) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(address).await.map_err(|error| format!("cannot listen for metrics on {address}: {error}"))?;
    let bound: SocketAddr = listener.local_addr().map_err(|error| error.to_string())?;
    context.logger.info("NETWORK", 23016, "listener", "Serving metrics", json!({ "address": bound.to_string() }));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let (context, service) = (Arc::clone(&context), Arc::clone(&service));
            tokio::spawn(async move {
                let answer = hyper::service::service_fn(move |request| {
                    let (context, service) = (Arc::clone(&context), Arc::clone(&service));
                    async move { Ok::<_, std::convert::Infallible>(respond(&context, service.as_ref(), &request).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), answer).await;
            });
        }
    });
    Ok(())
}

async fn respond<B>(context: &Arc<ServerContext>, service: &dyn Service, request: &Request<B>) -> Response<Full<Bytes>> {
    if request.method() != hyper::Method::GET || request.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "only GET /metrics is served here\n".into());
    }
    let scrape = doc! { "serverStatus": 1, "opLatencies": { "histograms": true } };
    let status = match CommandRequest::new("admin".into(), scrape, ConnectionInfo::internal(SCRAPE_CONNECTION_ID)) {
        Ok(command) => service.run(context, command).await.into_document(),
        Err(error) => return plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{}\n", error.message)),
    };
    match render(&status) {
        Ok(text) => {
            let mut response = plain(StatusCode::OK, text);
            response.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
            response
        }
        Err(error) => plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n")),
    }
}

fn plain(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

/// The samples of a serverStatus reply, in Prometheus' text format.
pub fn render(status: &Document) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix("myriad");
    let commands_total = GaugeFamily::default();
    let commands_failed = GaugeFamily::default();
    let latency = GaugeFamily::default();
    let operations = GaugeFamily::default();
    let mut gauges: Vec<(Vec<String>, f64)> = Vec::new();
    walk(status, &mut Vec::new(), &mut gauges, 0);
    for (path, value) in gauges {
        let labelled = match path.as_slice() {
            [metrics, commands, command, field] if metrics == "metrics" && commands == "commands" => {
                let family = if field == "failed" { &commands_failed } else if field == "total" { &commands_total } else { continue };
                Some((family, vec![("command".to_string(), command.clone())]))
            }
            [section, kind, field] if section == "opLatencies" && (field == "latency" || field == "ops") => {
                Some((if field == "latency" { &latency } else { &operations }, vec![("kind".to_string(), kind.clone())]))
            }
            _ => None,
        };
        match labelled {
            Some((family, labels)) => {
                family.get_or_create(&labels).set(value);
            }
            None => {
                let gauge = Gauge::<f64, AtomicU64>::default();
                gauge.set(value);
                registry.register(metric_name(&path), format!("serverStatus {}", path.join(".")), gauge);
            }
        }
    }
    registry.register("metrics_commands_total", "serverStatus metrics.commands.<command>.total", commands_total);
    registry.register("metrics_commands_failed", "serverStatus metrics.commands.<command>.failed", commands_failed);
    registry.register("op_latencies_latency_microseconds", "serverStatus opLatencies.<kind>.latency", latency);
    registry.register("op_latencies_ops", "serverStatus opLatencies.<kind>.ops", operations);
    if let Ok(latencies) = status.get_document("opLatencies") {
        registry.register("op_latencies_microseconds", "serverStatus opLatencies.<kind>.histogram", LatencyHistograms::of(latencies));
    }
    let mut text = String::new();
    encode(&mut text, &registry)?;
    Ok(text)
}

/// opLatencies' histograms, one per kind, as Prometheus histograms with a `kind` label.
#[derive(Debug)]
struct LatencyHistograms {
    /// Per kind: its name, total latency (µs), operations, and (upper bound, count) buckets.
    kinds: Vec<(String, f64, u64, Vec<(f64, u64)>)>,
}

impl LatencyHistograms {
    fn of(latencies: &Document) -> LatencyHistograms {
        let number = |value: Option<&Bson>| match value {
            Some(Bson::Int64(number)) => u64::try_from(*number).unwrap_or(0),
            Some(Bson::Int32(number)) => u64::try_from(*number).unwrap_or(0),
            _ => 0,
        };
        let mut kinds = Vec::new();
        for (kind, figures) in latencies {
            let Bson::Document(figures) = figures else { continue };
            let Ok(histogram) = figures.get_array("histogram") else { continue };
            let mut buckets: Vec<(f64, u64)> = histogram
                .iter()
                .filter_map(Bson::as_document)
                .map(|bucket| {
                    let lower = number(bucket.get("micros"));
                    let upper = myriad_commands::latency::bucket_upper_bound_micros(lower).map_or(f64::MAX, |upper| upper as f64);
                    (upper, number(bucket.get("count")))
                })
                .collect();
            if buckets.last().is_none_or(|(upper, _)| *upper != f64::MAX) {
                buckets.push((f64::MAX, 0));
            }
            kinds.push((kind.clone(), number(figures.get("latency")) as f64, number(figures.get("ops")), buckets));
        }
        LatencyHistograms { kinds }
    }
}

impl prometheus_client::encoding::EncodeMetric for LatencyHistograms {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> Result<(), std::fmt::Error> {
        for (kind, sum, count, buckets) in &self.kinds {
            let labels = vec![("kind".to_string(), kind.clone())];
            encoder.encode_family(&labels)?.encode_histogram::<()>(*sum, *count, buckets, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

/// Collects every number under `document` (booleans as 0 or 1) with its path.
fn walk(document: &Document, path: &mut Vec<String>, gauges: &mut Vec<(Vec<String>, f64)>, depth: usize) {
    for (field, value) in document {
        let number = match value {
            Bson::Int32(number) => Some(f64::from(*number)),
            Bson::Int64(number) => Some(*number as f64),
            Bson::Double(number) => Some(*number),
            Bson::Boolean(flag) => Some(if *flag { 1.0 } else { 0.0 }),
            _ => None,
        };
        path.push(field.clone());
        match (number, value) {
            (Some(number), _) => gauges.push((path.clone(), number)),
            (None, Bson::Document(inner)) if depth + 1 < MAX_DEPTH => walk(inner, path, gauges, depth + 1),
            _ => {}
        }
        path.pop();
    }
}

/// A metric name for a path: its parts joined by `_`, each character outside `[A-Za-z0-9_]`
/// replaced by `_` (Prometheus' rule for names).
fn metric_name(path: &[String]) -> String {
    path.join("_").chars().map(|character| if character.is_ascii_alphanumeric() || character == '_' { character } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_become_gauges_and_commands_and_latencies_become_labelled_families() {
        let status = doc! {
            "ok": 1.0,
            "host": "myriad",
            "connections": { "current": 3, "available": 997i64 },
            "opcounters": { "insert": 5i64 },
            "storageEngine": { "persistent": true, "name": "rocksdb" },
            "metrics": { "commands": { "find": { "total": 7i64, "failed": 1i64 }, "insert": { "total": 2i64, "failed": 0i64 } } },
            "opLatencies": { "reads": { "histogram": [ { "micros": 64i64, "count": 3i64 }, { "micros": 256i64, "count": 1i64 } ], "latency": 120i64, "ops": 4i64 } },
            "locks": [ { "ignored": 1 } ],
            "weird.name": { "a-b": 2 },
        };
        let text = render(&status).unwrap();
        for expected in [
            "myriad_connections_current 3.0",
            "myriad_connections_available 997.0",
            "myriad_opcounters_insert 5.0",
            "myriad_storageEngine_persistent 1.0",
            "myriad_metrics_commands_total{command=\"find\"} 7.0",
            "myriad_metrics_commands_failed{command=\"find\"} 1.0",
            "myriad_metrics_commands_total{command=\"insert\"} 2.0",
            "myriad_op_latencies_latency_microseconds{kind=\"reads\"} 120.0",
            "myriad_op_latencies_ops{kind=\"reads\"} 4.0",
            "# TYPE myriad_op_latencies_microseconds histogram",
            "myriad_op_latencies_microseconds_sum{kind=\"reads\"} 120.0",
            "myriad_op_latencies_microseconds_count{kind=\"reads\"} 4",
            "myriad_op_latencies_microseconds_bucket{le=\"128.0\",kind=\"reads\"} 3",
            "myriad_op_latencies_microseconds_bucket{le=\"512.0\",kind=\"reads\"} 4",
            "myriad_op_latencies_microseconds_bucket{le=\"+Inf\",kind=\"reads\"} 4",
            "myriad_weird_name_a_b 2.0",
            "# EOF",
        ] {
            assert!(text.lines().any(|line| line == expected), "missing {expected:?} in:\n{text}");
        }
        assert!(!text.contains("host"), "strings are not samples");
        assert!(!text.contains("ignored"), "arrays are skipped");
    }

    #[test]
    fn the_walk_stops_at_its_depth_bound() {
        let mut deep = doc! { "leaf": 1 };
        for level in 0..20 {
            deep = doc! { format!("level{level}"): deep };
        }
        let mut gauges = Vec::new();
        walk(&deep, &mut Vec::new(), &mut gauges, 0);
        assert!(gauges.is_empty(), "a number deeper than the bound is not reached");
    }
}
