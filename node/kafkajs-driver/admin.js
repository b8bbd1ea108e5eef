'use strict'
/*
 * One call of KafkaJS's admin client, its answer printed as one JSON
 * object on stdout (zkcoord/testing/kafkajs.py):
 *
 *   node admin.js CONFIG_JSON
 *
 * CONFIG_JSON: {"brokers": ["host:port"], "call": NAME, "args": [...]}: the
 * admin client's method NAME (listGroups, describeGroups, fetchOffsets, ...)
 * called with args as KafkaJS takes them (describeGroups: [["g"]];
 * fetchOffsets: [{"groupId": "g", "topics": ["t"]}]). Its answer is printed
 * as {"answer": ...}; describeGroups' member metadata and assignment come
 * back decoded by KafkaJS's own AssignerProtocol (as "subscription" and
 * "assignment"), as an application reads them. An error is printed as
 * {"error": {"class", "message", "type"}} ("type": the Kafka error's name
 * at the bottom of its causes) and the exit code is 1. KafkaJS's own log
 * goes to stderr.
 */

const { Kafka, AssignerProtocol, logLevel } = require('kafkajs')

const { brokers, call, args } = JSON.parse(process.argv[2])

const toStderr = () => ({ namespace, level, log }) => {
  process.stderr.write(JSON.stringify({ level: logLevel[level] || level, namespace, ...log }) + '\n')
}

function decodedMember(member) {
  const { memberMetadata, memberAssignment, ...rest } = member
  const subscription = memberMetadata.length ? AssignerProtocol.MemberMetadata.decode(memberMetadata) : null
  const assignment = memberAssignment.length ? AssignerProtocol.MemberAssignment.decode(memberAssignment) : null
  return {
    ...rest,
    subscription: subscription && { version: subscription.version, topics: subscription.topics },
    assignment: assignment && { version: assignment.version, assignment: assignment.assignment },
  }
}

// What an answer becomes before it is printed: Buffers decoded where
// KafkaJS's application would decode them.
const shown = {
  describeGroups: ({ groups }) => ({
    groups: groups.map(group => ({ ...group, members: group.members.map(decodedMember) })),
  }),
}

async function main() {
  const admin = new Kafka({ clientId: 'zkcoord-kafkajs-admin', brokers, logLevel: logLevel.WARN, logCreator: toStderr })
    .admin()
  if (typeof admin[call] !== 'function') throw new Error(`the admin client has no call ${call}`)
  await admin.connect()
  try {
    const answer = await admin[call](...(args || []))
    const printed = answer === undefined ? null : (shown[call] || (a => a))(answer) // some calls answer nothing
    process.stdout.write(JSON.stringify({ answer: printed }) + '\n')
  } finally {
    await admin.disconnect()
  }
}

main().catch(error => {
  let cause = error
  while (cause && cause.cause) cause = cause.cause
  const type = (cause && cause.type) || null
  process.stdout.write(JSON.stringify({ error: { class: error.name, message: error.message, type } }) + '\n')
  process.exit(1)
})
