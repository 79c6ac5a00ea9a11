"""kafka-python 2.0.2 against tally's broker (run by server_tools_test.cc).

Usage: server_kafka_python.py BOOTSTRAP TOPIC GROUP
Creates TOPIC with KafkaAdminClient, sends 20 records with acks='all',
reads them back in a consumer group, commits, checks the committed offsets
and prints OK. Exits non-zero with the reason otherwise.
"""
import sys

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic


def main():
    bootstrap, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    if topic not in admin.list_topics():
        sys.exit("topic not listed after create_topics")
    admin.close()

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks='all', linger_ms=5)
    futures = [producer.send(topic, key=b'k%d' % (i % 3), value=b'v%d' % i) for i in range(20)]
    producer.flush(10)
    for f in futures:
        f.get(timeout=10)
    producer.close()

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset='earliest', enable_auto_commit=False,
                             consumer_timeout_ms=15000)
    seen = []
    for record in consumer:
        seen.append(record.value)
        if len(seen) == 20:
            break
    if sorted(seen) != sorted(b'v%d' % i for i in range(20)):
        sys.exit("read %d records: %r" % (len(seen), seen))
    consumer.commit()
    committed = sum(consumer.committed(TopicPartition(topic, p)) or 0 for p in (0, 1))
    if committed != 20:
        sys.exit("committed offsets sum to %d, not 20" % committed)
    consumer.close()
    print("OK")


if __name__ == '__main__':
    main()
