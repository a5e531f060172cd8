//! A SAM template as CloudFormation runs it: each nested application
//! (`AWS::Serverless::Application` with a local `Location`) merged into the
//! parent, its parameters replaced by what the parent passes and the
//! parent's `!GetAtt App.Outputs.Name` by the output's value. The result
//! reads as one template, so the template tests hold for the composition.

use std::collections::BTreeMap;
use std::path::Path;

use serde_norway::value::{Tag, TaggedValue};
use serde_norway::{Mapping, Value};

/// The template at `path`, its nested applications merged in.
pub fn composed(path: &Path) -> Value {
    let mut parent = read(path);
    let dir = path.parent().expect("a template's folder");
    let mut outputs: BTreeMap<String, Mapping> = BTreeMap::new();
    for (id, passed, mut piece) in applications(&parent, dir) {
        let mut values = BTreeMap::new();
        for (name, _) in piece["Parameters"].as_mapping().expect("parameters") {
            let name = name.as_str().expect("a name").to_owned();
            let value = passed
                .get(name.as_str())
                .unwrap_or_else(|| panic!("{id} does not pass {name}"));
            values.insert(name, resolve_outputs(unjoined(value), &outputs));
        }
        for section in ["Conditions", "Rules", "Resources", "Outputs"] {
            if let Some(body) = piece.get_mut(section) {
                replace_parameters(body, &values);
            }
        }
        outputs.insert(
            id.clone(),
            piece["Outputs"]
                .as_mapping()
                .map(|all| {
                    all.iter()
                        .map(|(name, output)| (name.clone(), output["Value"].clone()))
                        .collect()
                })
                .unwrap_or_default(),
        );
        let parent = parent.as_mapping_mut().expect("a template");
        parent["Resources"]
            .as_mapping_mut()
            .expect("resources")
            .remove(id.as_str());
        for section in ["Conditions", "Rules", "Resources"] {
            let Some(body) = piece[section].as_mapping() else {
                continue;
            };
            let into = parent
                .entry(section.into())
                .or_insert_with(|| Value::Mapping(Mapping::new()))
                .as_mapping_mut()
                .expect("a section");
            for (name, value) in body {
                match into.get(name) {
                    None => {
                        into.insert(name.clone(), value.clone());
                    }
                    // A condition both define must mean the same in both.
                    Some(theirs) if section == "Conditions" && theirs == value => {}
                    Some(_) => panic!("{section} {name:?} of {id} differs from its parent's"),
                }
            }
        }
    }
    for section in ["Conditions", "Resources", "Outputs"] {
        if let Some(body) = parent.get_mut(section) {
            *body = resolve_outputs(body, &outputs);
        }
    }
    parent
}

/// The nested applications' templates of the template at `path`, by logical
/// id, as written.
pub fn pieces(path: &Path) -> Vec<(String, Value)> {
    let parent = read(path);
    let dir = path.parent().expect("a template's folder");
    applications(&parent, dir)
        .into_iter()
        .map(|(id, _, piece)| (id, piece))
        .collect()
}

/// Each `AWS::Serverless::Application` of `template`: its logical id, the
/// parameters it passes, and the template its local `Location` names.
fn applications(template: &Value, dir: &Path) -> Vec<(String, Mapping, Value)> {
    resources(template)
        .iter()
        .filter(|(_, resource)| resource["Type"] == "AWS::Serverless::Application")
        .map(|(id, app)| {
            let location = app["Properties"]["Location"]
                .as_str()
                .expect("a local Location");
            let passed = app["Properties"]["Parameters"]
                .as_mapping()
                .cloned()
                .unwrap_or_default();
            (
                id.as_str().expect("an id").to_owned(),
                passed,
                read(&dir.join(location)),
            )
        })
        .collect()
}

fn read(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {path:?}: {e}"));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{path:?} is not YAML: {e}"))
}

fn resources(template: &Value) -> &Mapping {
    template["Resources"].as_mapping().expect("resources")
}

fn tagged(tag: &str, value: Value) -> Value {
    Value::Tagged(Box::new(TaggedValue {
        tag: Tag::new(tag),
        value,
    }))
}

fn tag(value: &Value) -> Option<(String, &Value)> {
    match value {
        Value::Tagged(t) => Some((
            t.tag.to_string().trim_start_matches('!').to_owned(),
            &t.value,
        )),
        _ => None,
    }
}

/// A list parameter is passed as `!Join [",", !Ref List]`: the list itself.
fn unjoined(value: &Value) -> &Value {
    match tag(value) {
        Some((name, Value::Sequence(parts))) if name == "Join" && parts[0] == "," => &parts[1],
        _ => value,
    }
}

/// `value` with every `!GetAtt App.Outputs.Name` (and `${App.Outputs.Name}`)
/// replaced by the output's value.
fn resolve_outputs(value: &Value, outputs: &BTreeMap<String, Mapping>) -> Value {
    resolve_under(value, outputs, None)
}

/// `resolve_outputs` within the true branch of `!If [condition, ...]`,
/// where an output `!If [condition, X, ""]` (of a resource that exists
/// only under it) is X.
fn resolve_under(
    value: &Value,
    outputs: &BTreeMap<String, Mapping>,
    condition: Option<&Value>,
) -> Value {
    let output = |path: &str| -> Option<Value> {
        let mut parts = path.splitn(3, '.');
        let (app, word, name) = (parts.next()?, parts.next()?, parts.next()?);
        (word == "Outputs").then_some(())?;
        let value = outputs.get(app)?.get(name);
        let value = value.unwrap_or_else(|| panic!("{app} has no output {name}"));
        Some(match tag(value) {
            Some((name, Value::Sequence(parts)))
                if name == "If" && Some(&parts[0]) == condition && parts[2] == "" =>
            {
                parts[1].clone()
            }
            _ => value.clone(),
        })
    };
    match (tag(value), value) {
        (Some((name, Value::String(path))), _) if name == "GetAtt" => {
            output(path).unwrap_or_else(|| value.clone())
        }
        (Some((name, Value::String(text))), _) if name == "Sub" => tagged(
            "Sub",
            Value::String(substitute(text, |v| output(v).map(|o| sub_name(&o)))),
        ),
        (Some((name, Value::Sequence(parts))), _) if name == "If" && parts.len() == 3 => tagged(
            "If",
            Value::Sequence(vec![
                parts[0].clone(),
                resolve_under(&parts[1], outputs, Some(&parts[0])),
                resolve_under(&parts[2], outputs, None),
            ]),
        ),
        (Some((name, inner)), _) => tagged(&name, resolve_under(inner, outputs, condition)),
        (None, Value::Sequence(items)) => Value::Sequence(
            items
                .iter()
                .map(|item| resolve_under(item, outputs, condition))
                .collect(),
        ),
        (None, Value::Mapping(map)) => Value::Mapping(
            map.iter()
                .map(|(k, v)| (k.clone(), resolve_under(v, outputs, condition)))
                .collect(),
        ),
        _ => value.clone(),
    }
}

/// Every `!Ref Parameter` of `value` replaced by the value passed for it.
fn replace_parameters(value: &mut Value, passed: &BTreeMap<String, Value>) {
    match value {
        Value::Tagged(t) => {
            let name = t.tag.to_string();
            match (name.trim_start_matches('!'), &mut t.value) {
                ("Ref", Value::String(parameter)) if passed.contains_key(parameter.as_str()) => {
                    *value = passed[parameter.as_str()].clone();
                }
                ("Sub", Value::String(text)) => {
                    *text = substitute(text, |v| passed.get(v).map(sub_name));
                }
                (_, inner) => replace_parameters(inner, passed),
            }
        }
        Value::Sequence(items) => items
            .iter_mut()
            .for_each(|item| replace_parameters(item, passed)),
        Value::Mapping(map) => map.values_mut().for_each(|v| replace_parameters(v, passed)),
        _ => {}
    }
}

/// What `${...}` stands for `value` in a `!Sub` text: `X` for `!Ref X`,
/// `X.Attr` for `!GetAtt X.Attr`.
fn sub_name(value: &Value) -> String {
    match tag(value) {
        Some((name, Value::String(target))) if name == "Ref" || name == "GetAtt" => target.clone(),
        // An output of a resource that may not exist: `!If [Its, X, ""]`.
        Some((name, Value::Sequence(parts))) if name == "If" && parts[2] == "" => {
            sub_name(&parts[1])
        }
        _ => panic!("{value:?} cannot stand in a !Sub text"),
    }
}

/// `text` with each `${name}` that `with` knows replaced by `${its value}`.
fn substitute(text: &str, with: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let Some(end) = rest[start..].find('}') else {
            break;
        };
        let name = &rest[start + 2..start + end];
        out.push_str(&rest[..start]);
        match with(name) {
            Some(value) => out.push_str(&format!("${{{value}}}")),
            None => out.push_str(&rest[start..=start + end]),
        }
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    out
}
