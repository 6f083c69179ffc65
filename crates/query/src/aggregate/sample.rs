//! `$sample: {size: n}`: n documents chosen uniformly at random. Each document gets a random
//! key and the stage keeps the n smallest keys (a top-k sort), so it holds at most n
//! documents and spills like `$sort` past the memory limit (292 without allowDiskUse).

use std::hash::{BuildHasher, Hasher};

use bson::{doc, Bson, Document};

use super::context::{BufferedStage, BufferedState, OutputStream, RunContext};
use super::memory::approximate_document_size_bytes;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};
use crate::external_sort::{ExternalSorter, SortedOutput};
use crate::sort::SortSpec;

const KEY_FIELD: &str = "k";
const DOCUMENT_FIELD: &str = "d";

#[derive(Debug)]
pub(crate) struct Sample {
    size: u64,
}

impl Sample {
    pub(crate) fn parse(argument: &Bson) -> QueryResult<Sample> {
        let Bson::Document(specification) = argument else {
            return Err(QueryError::Location(28745, "the $sample stage specification must be an object".into()));
        };
        let mut size = None;
        for (key, value) in specification {
            if key != "size" {
                return Err(QueryError::Location(28748, format!("unrecognized option to $sample: {key}")));
            }
            let number = match value {
                Bson::Int32(number) => f64::from(*number),
                Bson::Int64(number) => *number as f64,
                Bson::Double(number) => *number,
                Bson::Decimal128(_) => crate::expression::Numeric::from_bson(value).map_or(f64::NAN, |number| number.as_f64()),
                other => return Err(QueryError::Location(28746, format!("size argument to $sample must be a number, found {}", type_name(other)))),
            };
            if number < 0.0 || number.is_nan() {
                return Err(QueryError::Location(28747, "size argument to $sample must not be negative".into()));
            }
            size = Some(if number >= u64::MAX as f64 { u64::MAX } else { number as u64 });
        }
        let size = size.ok_or_else(|| QueryError::Location(28749, "$sample stage must specify a size".into()))?;
        Ok(Sample { size })
    }

    pub(crate) fn size_bson(&self) -> Bson {
        Bson::Int64(i64::try_from(self.size).unwrap_or(i64::MAX))
    }
}

/// A xorshift64* generator seeded from the process's random hasher keys: no dependency, and
/// good enough for choosing documents.
pub(crate) struct RandomNumbers(u64);

impl RandomNumbers {
    pub(crate) fn new() -> RandomNumbers {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_nanos() as u64));
        RandomNumbers(hasher.finish() | 1)
    }

    /// A double in [0, 1).
    pub(crate) fn next_unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let value = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (value >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl BufferedStage for Sample {
    fn start(&self, context: &RunContext) -> Box<dyn BufferedState> {
        let spec = SortSpec::parse(&doc! { KEY_FIELD: 1 }).unwrap_or_default();
        let sorter = ExternalSorter::new(
            spec,
            Some(usize::try_from(self.size).unwrap_or(usize::MAX)),
            usize::try_from(context.memory_limit_bytes).unwrap_or(usize::MAX),
            context.spill_directory.clone(),
        );
        Box::new(SampleState { sorter: Box::new(sorter), random: RandomNumbers::new(), size: self.size })
    }
}

struct SampleState {
    sorter: Box<ExternalSorter>,
    random: RandomNumbers,
    size: u64,
}

impl BufferedState for SampleState {
    fn add(&mut self, document: Document) -> QueryResult<()> {
        if self.size == 0 {
            return Ok(());
        }
        let size_bytes = usize::try_from(approximate_document_size_bytes(&document)).unwrap_or(usize::MAX);
        let wrapped = doc! { KEY_FIELD: self.random.next_unit(), DOCUMENT_FIELD: document };
        self.sorter.push(0, wrapped, size_bytes)
    }

    fn finish(self: Box<Self>) -> QueryResult<Box<dyn OutputStream>> {
        Ok(Box::new(Unwrapped(self.sorter.finish()?)))
    }
}

/// Sorted `{k, d}` records, handing out their documents.
pub(crate) struct Unwrapped(pub(crate) SortedOutput);

impl OutputStream for Unwrapped {
    fn next_document(&mut self) -> QueryResult<Option<Document>> {
        Ok(self.0.next()?.and_then(|(_, mut record, _)| match record.remove(DOCUMENT_FIELD) {
            Some(Bson::Document(document)) => Some(document),
            _ => None,
        }))
    }
}
