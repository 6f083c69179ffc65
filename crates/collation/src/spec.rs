//! A collation document's options, read and checked as mongod's ICU collator factory reads
//! them: the same order, the same defaults (taken from the locale's ICU collator), the same
//! codes and messages.

use bson::{doc, Bson, Document};

use crate::error::{shell_string, type_name, CollationError, BAD_VALUE, FAILED_TO_PARSE, INCOMPATIBLE_COLLATION_VERSION, TYPE_MISMATCH};
use crate::icu::{Attribute, AttributeValue, IcuCollator, IcuFailure, ReorderCode};

/// The collator version mongod reports (its ICU); Myriad reports the same one so stored
/// specifications and drivers agree.
pub const VERSION: &str = "57.1";

/// The fields a collation document may have, besides `locale`.
const OPTION_FIELDS: &[&str] =
    &["caseLevel", "caseFirst", "strength", "numericOrdering", "alternate", "maxVariable", "normalization", "backwards", "version"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaseFirst {
    Upper,
    Lower,
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alternate {
    NonIgnorable,
    Shifted,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MaxVariable {
    Punct,
    Space,
}

/// A complete (every option resolved) non-simple collation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CollationSpec {
    pub locale: String,
    pub case_level: bool,
    pub case_first: CaseFirst,
    /// 1 (primary) to 5 (identical).
    pub strength: u8,
    pub numeric_ordering: bool,
    pub alternate: Alternate,
    pub max_variable: MaxVariable,
    pub normalization: bool,
    pub backwards: bool,
}

impl CollationSpec {
    /// The normalised document mongod shows (listIndexes, listCollections, explain).
    pub fn to_document(&self) -> Document {
        doc! {
            "locale": self.locale.clone(),
            "caseLevel": self.case_level,
            "caseFirst": match self.case_first { CaseFirst::Upper => "upper", CaseFirst::Lower => "lower", CaseFirst::Off => "off" },
            "strength": i32::from(self.strength),
            "numericOrdering": self.numeric_ordering,
            "alternate": match self.alternate { Alternate::NonIgnorable => "non-ignorable", Alternate::Shifted => "shifted" },
            "maxVariable": match self.max_variable { MaxVariable::Punct => "punct", MaxVariable::Space => "space" },
            "normalization": self.normalization,
            "backwards": self.backwards,
            "version": VERSION,
        }
    }
}

fn icu_error(action: &str, field: &str, failure: IcuFailure, spec: &Document) -> CollationError {
    CollationError::operation_failed(format!("Failed to {action} '{field}' attribute: {:?}. Collation spec: {}", failure.0, shell_string(spec)))
}

/// bsonExtractTypedField's errors: absent is `None`, the wrong type is TypeMismatch.
fn typed_field<'a>(spec: &'a Document, field: &str, expected: &str) -> Result<Option<&'a Bson>, CollationError> {
    match spec.get(field) {
        None => Ok(None),
        Some(value) if type_name(value) == expected => Ok(Some(value)),
        Some(other) => Err(CollationError::new(
            TYPE_MISMATCH,
            format!("\"{field}\" had the wrong type. Expected {expected}, found {}", type_name(other)),
        )),
    }
}

fn bool_field(spec: &Document, field: &str) -> Result<Option<bool>, CollationError> {
    Ok(typed_field(spec, field, "bool")?.and_then(Bson::as_bool))
}

fn string_field<'a>(spec: &'a Document, field: &str) -> Result<Option<&'a str>, CollationError> {
    Ok(typed_field(spec, field, "string")?.and_then(Bson::as_str))
}

/// bsonExtractIntegerField: any number holding an exact 64-bit integer.
fn integer_field(spec: &Document, field: &str) -> Result<Option<i64>, CollationError> {
    let Some(value) = spec.get(field) else { return Ok(None) };
    let not_exact = || {
        CollationError::new(
            BAD_VALUE,
            format!("Expected field \"{field}\" to have a value exactly representable as a 64-bit integer, but found {field}: {}", crate::error::shell_value(value)),
        )
    };
    match value {
        Bson::Int32(number) => Ok(Some(i64::from(*number))),
        Bson::Int64(number) => Ok(Some(*number)),
        Bson::Double(number) if number.fract() == 0.0 && number.abs() < 9.2e18 => Ok(Some(*number as i64)),
        Bson::Decimal128(number) => match number.to_string().parse::<f64>() {
            Ok(parsed) if parsed.fract() == 0.0 && parsed.abs() < 9.2e18 => Ok(Some(parsed as i64)),
            _ => Err(not_exact()),
        },
        Bson::Double(_) => Err(not_exact()),
        other => Err(CollationError::new(
            TYPE_MISMATCH,
            format!("Expected field \"{field}\" to have numeric type, but found {}", type_name(other)),
        )),
    }
}

fn choice_error(field: &str, choices: &str, got: &str) -> CollationError {
    CollationError::new(FAILED_TO_PARSE, format!("Field '{field}' must be {choices}. Got: {got}"))
}

fn on_off(value: bool) -> AttributeValue {
    if value {
        AttributeValue::UCOL_ON
    } else {
        AttributeValue::UCOL_OFF
    }
}

/// Reads a boolean option: the document's value (set on the collator) or the locale's default.
fn boolean_option(collator: &mut IcuCollator, spec: &Document, field: &str, attribute: Attribute) -> Result<bool, CollationError> {
    match bool_field(spec, field)? {
        Some(value) => {
            collator.set_attribute(attribute, on_off(value)).map_err(|failure| icu_error("set", field, failure, spec))?;
            Ok(value)
        }
        None => {
            let value = collator.attribute(attribute).map_err(|failure| icu_error("get", field, failure, spec))?;
            Ok(value == AttributeValue::UCOL_ON)
        }
    }
}

fn case_first_option(collator: &mut IcuCollator, spec: &Document) -> Result<CaseFirst, CollationError> {
    let field = "caseFirst";
    let Some(text) = string_field(spec, field)? else {
        let value = collator.attribute(Attribute::UCOL_CASE_FIRST).map_err(|failure| icu_error("get", field, failure, spec))?;
        return Ok(match value {
            AttributeValue::UCOL_UPPER_FIRST => CaseFirst::Upper,
            AttributeValue::UCOL_LOWER_FIRST => CaseFirst::Lower,
            _ => CaseFirst::Off,
        });
    };
    let (case_first, value) = match text {
        "upper" => (CaseFirst::Upper, AttributeValue::UCOL_UPPER_FIRST),
        "lower" => (CaseFirst::Lower, AttributeValue::UCOL_LOWER_FIRST),
        "off" => (CaseFirst::Off, AttributeValue::UCOL_OFF),
        other => return Err(choice_error(field, "'upper', 'lower', or 'off'", other)),
    };
    collator.set_attribute(Attribute::UCOL_CASE_FIRST, value).map_err(|failure| icu_error("set", field, failure, spec))?;
    Ok(case_first)
}

const STRENGTHS: [AttributeValue; 5] = [
    AttributeValue::UCOL_PRIMARY,
    AttributeValue::UCOL_SECONDARY,
    AttributeValue::UCOL_TERTIARY,
    AttributeValue::UCOL_QUATERNARY,
    AttributeValue::UCOL_IDENTICAL,
];

fn strength_option(collator: &mut IcuCollator, spec: &Document) -> Result<u8, CollationError> {
    let field = "strength";
    let Some(number) = integer_field(spec, field)? else {
        let value = collator.attribute(Attribute::UCOL_STRENGTH).map_err(|failure| icu_error("get", field, failure, spec))?;
        let position = STRENGTHS.iter().position(|strength| *strength == value).unwrap_or(2);
        return Ok(position as u8 + 1);
    };
    let Some(value) = usize::try_from(number).ok().filter(|n| (1..=5).contains(n)).map(|n| STRENGTHS[n - 1]) else {
        return Err(CollationError::new(FAILED_TO_PARSE, format!("Field '{field}' must be an integer 1 through 5. Got: {number}")));
    };
    collator.set_attribute(Attribute::UCOL_STRENGTH, value).map_err(|failure| icu_error("set", field, failure, spec))?;
    Ok(number as u8)
}

fn alternate_option(collator: &mut IcuCollator, spec: &Document) -> Result<Alternate, CollationError> {
    let field = "alternate";
    let Some(text) = string_field(spec, field)? else {
        let value = collator.attribute(Attribute::UCOL_ALTERNATE_HANDLING).map_err(|failure| icu_error("get", field, failure, spec))?;
        return Ok(if value == AttributeValue::UCOL_SHIFTED { Alternate::Shifted } else { Alternate::NonIgnorable });
    };
    let (alternate, value) = match text {
        "non-ignorable" => (Alternate::NonIgnorable, AttributeValue::UCOL_NON_IGNORABLE),
        "shifted" => (Alternate::Shifted, AttributeValue::UCOL_SHIFTED),
        other => return Err(choice_error(field, "'non-ignorable' or 'shifted'", other)),
    };
    collator.set_attribute(Attribute::UCOL_ALTERNATE_HANDLING, value).map_err(|failure| icu_error("set", field, failure, spec))?;
    Ok(alternate)
}

fn max_variable_option(collator: &mut IcuCollator, spec: &Document) -> Result<MaxVariable, CollationError> {
    let field = "maxVariable";
    let Some(text) = string_field(spec, field)? else {
        return Ok(if collator.max_variable() == ReorderCode::UCOL_REORDER_CODE_SPACE { MaxVariable::Space } else { MaxVariable::Punct });
    };
    let (max_variable, group) = match text {
        "punct" => (MaxVariable::Punct, ReorderCode::UCOL_REORDER_CODE_PUNCTUATION),
        "space" => (MaxVariable::Space, ReorderCode::UCOL_REORDER_CODE_SPACE),
        other => return Err(choice_error(field, "'punct' or 'space'", other)),
    };
    collator.set_max_variable(group).map_err(|failure| icu_error("set", field, failure, spec))?;
    Ok(max_variable)
}

/// Reads every option of `spec` (whose locale is `locale`) into `collator`, in mongod's order,
/// then checks the combinations mongod refuses.
pub(crate) fn resolve(collator: &mut IcuCollator, spec: &Document, locale: &str) -> Result<CollationSpec, CollationError> {
    let case_level = boolean_option(collator, spec, "caseLevel", Attribute::UCOL_CASE_LEVEL)?;
    let case_first = case_first_option(collator, spec)?;
    let strength = strength_option(collator, spec)?;
    let numeric_ordering = boolean_option(collator, spec, "numericOrdering", Attribute::UCOL_NUMERIC_COLLATION)?;
    let alternate = alternate_option(collator, spec)?;
    let max_variable = max_variable_option(collator, spec)?;
    let normalization = boolean_option(collator, spec, "normalization", Attribute::UCOL_NORMALIZATION_MODE)?;
    let backwards = boolean_option(collator, spec, "backwards", Attribute::UCOL_FRENCH_COLLATION)?;
    if let Some(version) = string_field(spec, "version")? {
        if version != VERSION {
            return Err(CollationError::new(
                INCOMPATIBLE_COLLATION_VERSION,
                format!(
                    "Requested collation version {version} but the only available collator version was {VERSION}. Requested collation spec: {}",
                    shell_string(spec)
                ),
            ));
        }
    }
    if spec.keys().any(|key| key != "locale" && !OPTION_FIELDS.contains(&key.as_str())) {
        return Err(CollationError::new(FAILED_TO_PARSE, format!("Collation spec contains unknown field. Collation spec: {}", shell_string(spec))));
    }
    let resolved = CollationSpec {
        locale: locale.to_string(),
        case_level,
        case_first,
        strength,
        numeric_ordering,
        alternate,
        max_variable,
        normalization,
        backwards,
    };
    check_combinations(&resolved)?;
    Ok(resolved)
}

/// mongod's validateCollationSpec.
fn check_combinations(spec: &CollationSpec) -> Result<(), CollationError> {
    if spec.backwards && spec.strength == 1 {
        return Err(CollationError::new(
            BAD_VALUE,
            format!("'backwards' is invalid with 'strength' of 1 in: {}", shell_string(&spec.to_document())),
        ));
    }
    if spec.case_first != CaseFirst::Off && !spec.case_level && spec.strength <= 2 {
        return Err(CollationError::new(
            BAD_VALUE,
            format!(
                "'caseFirst' is invalid unless 'caseLevel' is on or 'strength' is greater than 2 in: {}",
                shell_string(&spec.to_document())
            ),
        ));
    }
    Ok(())
}
