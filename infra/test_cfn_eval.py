"""Self-checks of infra/cfn_eval.py, on the real template.yaml and on small
templates written here. Run from the repository's root:

    source infra/local-env.sh
    $EXACTLY_ONCE_TOOLS/venv/bin/python -m unittest discover -s infra -p 'test_cfn_eval.py' -v
"""

import json
import pathlib
import sys
import tempfile
import textwrap
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cfn_eval  # noqa: E402

ROOT = HERE.parent
TEMPLATE = ROOT / "template.yaml"
CONFIGURATIONS = json.loads((ROOT / "cdk" / "example" / "configurations.json").read_text())


def sam(configuration, **extra):
    """template.yaml evaluated for one configuration of configurations.json."""
    return cfn_eval.evaluate(TEMPLATE, {**CONFIGURATIONS[configuration]["sam"], **extra})


def of_type(template, kind):
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


class TemplateYaml(unittest.TestCase):
    def test_every_configuration_evaluates(self):
        for name in CONFIGURATIONS:
            with self.subTest(name):
                template = sam(name)
                self.assertEqual(len(of_type(template, "AWS::Lambda::EventSourceMapping")), 1)
                self.assertNotIn("AWS::Serverless::Application", {r["Type"] for r in template["Resources"].values()})

    def test_postgres_has_no_table(self):
        template = sam("sqs-postgres")
        self.assertEqual(of_type(template, "AWS::DynamoDB::Table"), {})
        env = template["Resources"]["Function"]["Properties"]["Environment"]["Variables"]
        self.assertEqual((env["IDEMPOTENCY_STORE"], env["IDEMPOTENCY_TABLE"]), ("postgres", "idempotency"))

    def test_dynamodb_creates_two_tables(self):
        self.assertEqual(sorted(of_type(sam("kinesis-dynamodb"), "AWS::DynamoDB::Table")), ["IdempotencyTable", "LedgerTable"])

    def test_sqs_mapping_reports_items_and_has_no_destination(self):
        (mapping,) = of_type(sam("sqs-dynamodb"), "AWS::Lambda::EventSourceMapping").values()
        props = mapping["Properties"]
        self.assertEqual(props["FunctionResponseTypes"], ["ReportBatchItemFailures"])
        self.assertNotIn("DestinationConfig", props)
        self.assertNotIn("ScalingConfig", props)  # SqsMaximumConcurrency 0: AWS::NoValue
        self.assertEqual(props["EventSourceArn"], CONFIGURATIONS["sqs-dynamodb"]["sam"]["SqsQueueArn"])

    def test_fifo_batch_is_at_most_ten_without_window(self):
        (mapping,) = of_type(sam("sqs-fifo-redis"), "AWS::Lambda::EventSourceMapping").values()
        self.assertEqual(mapping["Properties"]["BatchSize"], 10)
        self.assertNotIn("MaximumBatchingWindowInSeconds", mapping["Properties"])

    def test_rabbitmq_mapping_has_no_partial_batch_response(self):
        (mapping,) = of_type(sam("rabbitmq-dynamodb"), "AWS::Lambda::EventSourceMapping").values()
        self.assertNotIn("FunctionResponseTypes", mapping["Properties"])
        self.assertEqual(mapping["Properties"]["Queues"], ["payments"])

    def test_msk_role_names_the_topic(self):
        role = sam("kafka-msk-dynamodb")["Resources"]["FunctionRole"]["Properties"]
        statements = {s["Sid"]: s for s in role["Policies"][0]["PolicyDocument"]["Statement"]}
        self.assertEqual(statements["KafkaTopic"]["Resource"],
                         "arn:aws:kafka:us-east-1:123456789012:topic/payments/0123-abcd/payments")
        self.assertIn("arn:aws:iam::aws:policy/service-role/AWSLambdaMSKExecutionRole", role["ManagedPolicyArns"])

    def test_a_handlers_own_tables_and_destinations_are_granted_only_when_named(self):
        def handler_statements(**extra):
            role = sam("sqs-dynamodb", **extra)["Resources"]["FunctionRole"]["Properties"]
            return {s["Sid"]: s for s in role["Policies"][0]["PolicyDocument"]["Statement"]
                    if s["Sid"].startswith("Handler")}
        self.assertEqual(handler_statements(), {})
        tables = ["arn:aws:dynamodb:us-east-1:123456789012:table/orders",
                  "arn:aws:dynamodb:us-east-1:123456789012:table/lines"]
        bus = "arn:aws:events:us-east-1:123456789012:event-bus/orders"
        named = handler_statements(HandlerTableArns=",".join(tables), HandlerDestinationArns=bus)
        self.assertEqual(named["HandlerTables"]["Resource"], tables)
        self.assertIn("dynamodb:UpdateItem", named["HandlerTables"]["Action"])
        self.assertEqual(named["HandlerDestinations"]["Resource"], [bus])
        self.assertIn("events:PutEvents", named["HandlerDestinations"]["Action"])
        cluster = "arn:aws:kafka:us-east-1:123456789012:cluster/orders/0123-abcd"
        topics = [f"arn:aws:kafka:us-east-1:123456789012:topic/orders/0123-abcd/{name}"
                  for name in ("order-events", "order-audit")]
        named = handler_statements(HandlerKafkaTopicArns=",".join(topics), HandlerKafkaClusterArn=cluster)
        self.assertEqual(list(named), ["HandlerKafkaTopics"])
        self.assertEqual(named["HandlerKafkaTopics"]["Resource"], [cluster, *topics])
        self.assertEqual(named["HandlerKafkaTopics"]["Action"],
                         ["kafka-cluster:Connect", "kafka-cluster:DescribeTopic", "kafka-cluster:WriteData"])
        with self.assertRaisesRegex(cfn_eval.CfnError, "HandlerKafkaTopicsNeedTheirCluster"):
            handler_statements(HandlerKafkaTopicArns=topics[0])

    def test_a_team_without_the_demo_ledger_gets_no_ledger_table_grant_or_announcements(self):
        def pieces(**parameters):
            """sam/exactly-once.yaml itself, as a team's template nests it."""
            sqs = {k: v for k, v in CONFIGURATIONS["sqs-dynamodb"]["sam"].items()
                   if k in ("EventSource", "SqsQueueArn", "IdempotencyStore")}
            return cfn_eval.evaluate(ROOT / "sam" / "exactly-once.yaml", {**sqs, **parameters})
        def sids(template):
            role = template["Resources"]["FunctionRole"]["Properties"]
            return {s["Sid"] for s in role["Policies"][0]["PolicyDocument"]["Statement"]}
        demo, team = pieces(), pieces(DemoLedger="false")
        self.assertIn("LedgerTable", demo["Resources"])
        self.assertIn("Ledger", sids(demo))
        self.assertNotIn("LedgerTable", team["Resources"])
        self.assertNotIn("Ledger", sids(team))
        self.assertEqual(team["Outputs"]["LedgerTable"]["Value"], "")
        with self.assertRaisesRegex(cfn_eval.CfnError, "LedgerEventsAreTheDemoLedgers"):
            pieces(DemoLedger="false", LedgerEvents="sqs")

    def test_rules_refuse_a_missing_queue(self):
        with self.assertRaisesRegex(cfn_eval.CfnError, "SqsNeedsAQueue"):
            cfn_eval.evaluate(TEMPLATE, {"EventSource": "sqs"})

    def test_parameters_are_checked(self):
        with self.assertRaisesRegex(cfn_eval.CfnError, "unknown parameter"):
            sam("sqs-dynamodb", NoSuchParameter="x")
        with self.assertRaisesRegex(cfn_eval.CfnError, "BatchSize"):
            sam("sqs-dynamodb", BatchSize="0")


class Drift(unittest.TestCase):
    """infra/drift.py's comparison, on the SAM side against itself and a changed copy."""

    def test_same_is_no_drift_and_a_change_is_named(self):
        import copy
        import drift
        template = sam("kinesis-dynamodb")
        self.assertEqual(drift.compare(drift.facts(template), drift.facts(copy.deepcopy(template))), [])
        changed = copy.deepcopy(template)
        changed["Resources"]["KinesisEventSourceMapping"]["Properties"]["MaximumRetryAttempts"] = 7
        changed["Resources"]["Extra"] = {"Type": "AWS::SQS::Queue", "Properties": {}}
        self.assertEqual(drift.compare(drift.facts(template), drift.facts(changed)), [
            "(a) AWS::SQS::Queue: SAM 2, CDK 3",
            "(c) mapping MaximumRetryAttempts: SAM 5, CDK 7"])


def write(directory, name, text):
    path = pathlib.Path(directory) / name
    path.write_text(textwrap.dedent(text))
    return path


class Intrinsics(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def test_functions(self):
        path = write(self.dir.name, "t.yaml", """
            Parameters:
              Ids: {Type: CommaDelimitedList, Default: "a,b"}
              Name: {Type: String, Default: x}
            Conditions:
              IsX: !Equals [!Ref Name, x]
              Never: !Not [!Condition IsX]
            Resources:
              Gone: {Type: AWS::SQS::Queue, Condition: Never}
              Queue:
                Type: AWS::SQS::Queue
                Properties:
                  List: [1, !If [IsX, !Ref AWS::NoValue, 2], !If [Never, 3, 4]]
                  Maybe: !If [Never, 5, !Ref AWS::NoValue]
                  Second: !Select [1, !Ref Ids]
                  Joined: !Join ["-", !Split [",", "p,q"]]
                  Known: !Sub "${AWS::Region}/${Name}/${!Literal}"
                  Partial: !Sub ["${Queue.Arn}:${N}:${Other}", {N: !Ref Name, Other: !Join ["", [!Ref Queue]]}]
            Outputs:
              Out: {Value: !GetAtt Queue.Arn}
              NotThere: {Condition: Never, Value: !Ref Gone}
            """)
        result = cfn_eval.evaluate(path)
        self.assertEqual(set(result["Resources"]), {"Queue"})
        props = result["Resources"]["Queue"]["Properties"]
        self.assertEqual(props["List"], [1, 4])
        self.assertNotIn("Maybe", props)
        self.assertEqual((props["Second"], props["Joined"]), ("b", "p-q"))
        self.assertEqual(props["Known"], "us-east-1/x/${Literal}")
        self.assertEqual(props["Partial"], {"Fn::Sub": ["${Queue.Arn}:x:${Other}",
                                                        {"Other": {"Fn::Join": ["", [{"Ref": "Queue"}]]}}]})
        self.assertEqual(result["Outputs"], {"Out": {"Value": {"Fn::GetAtt": ["Queue", "Arn"]}}})

    def test_ref_to_a_removed_resource_is_an_error(self):
        path = write(self.dir.name, "t.yaml", """
            Conditions: {Never: !Equals [a, b]}
            Resources:
              Gone: {Type: AWS::SQS::Queue, Condition: Never}
              Topic: {Type: AWS::SNS::Topic, Properties: {Name: !GetAtt Gone.QueueName}}
            """)
        with self.assertRaisesRegex(cfn_eval.CfnError, "Gone"):
            cfn_eval.evaluate(path)

    def test_nested_application(self):
        write(self.dir.name, "child.yaml", """
            Parameters:
              List: {Type: CommaDelimitedList}
              Upstream: {Type: String}
            Conditions: {Two: !Equals [!Select [1, !Ref List], b]}
            Resources:
              Inner: {Type: AWS::SQS::Queue, Properties: {Tag: !Ref Upstream}}
            Outputs:
              Arn: {Value: !If [Two, !GetAtt Inner.Arn, ""]}
            """)
        path = write(self.dir.name, "parent.yaml", """
            Parameters:
              Ids: {Type: CommaDelimitedList, Default: "a,b"}
            Resources:
              Topic: {Type: AWS::SNS::Topic}
              User: {Type: AWS::SNS::Topic, Properties: {Queue: !GetAtt App.Outputs.Arn}}
              App:
                Type: AWS::Serverless::Application
                Properties:
                  Location: child.yaml
                  Parameters: {List: !Join [",", !Ref Ids], Upstream: !Ref Topic}
            """)
        result = cfn_eval.evaluate(path)
        self.assertEqual(set(result["Resources"]), {"Topic", "User", "Inner"})
        self.assertEqual(result["Resources"]["User"]["Properties"]["Queue"], {"Fn::GetAtt": ["Inner", "Arn"]})
        self.assertEqual(result["Resources"]["Inner"]["Properties"]["Tag"], {"Ref": "Topic"})
        self.assertEqual(result["Applications"]["App"]["Parameters"]["List"], ["a", "b"])
        self.assertIs(result["Applications"]["App"]["Conditions"]["Two"], True)
        with self.assertRaisesRegex(cfn_eval.CfnError, "clashes"):
            write(self.dir.name, "parent2.yaml", path.read_text().replace("Topic: {Type", "Inner: {Type")
                  .replace("!Ref Topic", "!Ref Inner"))
            cfn_eval.evaluate(pathlib.Path(self.dir.name) / "parent2.yaml")


if __name__ == "__main__":
    unittest.main()
