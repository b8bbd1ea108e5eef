'use strict'
/*
 * N KafkaJS consumers of one group in one Node process, each committing
 * every record it consumed before it takes the next (autoCommit off), as
 * the harness drives them (zkcoord/testing/kafkajs.py):
 *
 *   node members.js CONFIG_JSON
 *
 * CONFIG_JSON: {"brokers": ["host:port"], "groupId": "g", "topics": ["t"],
 *   "members": N, "clientId": "c", "sessionTimeout": ms, "heartbeatInterval": ms,
 *   "rebalanceTimeout": ms, "assigner": "NAME"}. Without "assigner" a member
 * offers KafkaJS's own assignor (RoundRobinAssigner); with it, an assignor
 * of that name (it assigns as KafkaJS's round robin, should it ever lead).
 * Member i's client id is <clientId>-<i>.
 *
 * Stdout carries the events every member driver writes
 * (zkcoord/testing/driven_members.py), one JSON object a line. KafkaJS
 * rebalances eagerly and has no rebalance listener: "revoked" is written
 * for everything a member held when KafkaJS says it is rebalancing or
 * joins again, "assigned" with each assignment it is given. "error"
 * carries every error KafkaJS reports to its application: its crash event
 * ("phase": "run", with "retriable" and "restart", whether KafkaJS starts
 * the consumer again), a failed commit ("commit"), connect ("create"),
 * disconnect ("close") and a command not understood ("command"). KafkaJS's
 * own log goes to stderr.
 *
 * Stdin: "close I" (member I disconnects, leaving its group), "quit" (all
 * disconnect, then the driver exits); end of input is a quit.
 */

const readline = require('readline')
const { Kafka, AssignerProtocol, PartitionAssigners, logLevel } = require('kafkajs')

const config = JSON.parse(process.argv[2])

function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, ...fields, ts: Date.now() }) + '\n')
}

// An error as the events carry it; "type" is the Kafka error's name (e.g.
// INCONSISTENT_GROUP_PROTOCOL) of the error at the bottom of its causes.
function errorFields(error) {
  let cause = error
  while (cause && cause.cause) cause = cause.cause
  return {
    class: (error && error.name) || 'Error',
    message: String((error && error.message) || error),
    type: (cause && cause.type) || null,
    retriable: Boolean(cause && cause.retriable),
  }
}

// KafkaJS's log as JSON lines on stderr, apart from the events on stdout.
const toStderr = () => ({ namespace, level, log }) => {
  process.stderr.write(JSON.stringify({ level: logLevel[level] || level, namespace, ...log }) + '\n')
}

// An assignor named config.assigner: KafkaJS's round robin under another name.
function namedAssigner(name) {
  return ({ cluster }) => {
    const roundRobin = PartitionAssigners.roundRobin({ cluster })
    return {
      name,
      version: roundRobin.version,
      assign: args => roundRobin.assign(args),
      protocol: ({ topics }) => ({
        name,
        metadata: AssignerProtocol.MemberMetadata.encode({ version: roundRobin.version, topics }),
      }),
    }
  }
}

function partitionsOf(memberAssignment) {
  const partitions = []
  for (const [topic, numbers] of Object.entries(memberAssignment || {})) {
    for (const partition of numbers) partitions.push([topic, partition])
  }
  return partitions.sort()
}

class Member {
  constructor(index) {
    this.index = index
    this.held = []
    this.closed = false
    const kafka = new Kafka({
      clientId: `${config.clientId || config.groupId}-${index}`,
      brokers: config.brokers,
      logLevel: logLevel.WARN,
      logCreator: toStderr,
    })
    this.consumer = kafka.consumer({
      groupId: config.groupId,
      sessionTimeout: config.sessionTimeout || 6000,
      heartbeatInterval: config.heartbeatInterval || 500,
      rebalanceTimeout: config.rebalanceTimeout || 10000,
      maxWaitTimeInMs: 200,
      partitionAssigners: config.assigner ? [namedAssigner(config.assigner)] : undefined,
    })
    const { GROUP_JOIN, REBALANCING, CRASH } = this.consumer.events
    this.consumer.on(GROUP_JOIN, ({ payload }) => {
      this.revokeAll()
      this.held = partitionsOf(payload.memberAssignment)
      this.emit('assigned', { partitions: this.held, protocol: payload.groupProtocol, memberId: payload.memberId })
    })
    this.consumer.on(REBALANCING, () => this.revokeAll())
    this.consumer.on(CRASH, ({ payload }) => {
      this.revokeAll() // KafkaJS disconnected it: it holds nothing, restarted or not
      this.emit('error', { phase: 'run', restart: Boolean(payload.restart), ...errorFields(payload.error) })
    })
  }

  emit(event, fields = {}) {
    emit(event, { member: this.index, ...fields })
  }

  revokeAll() {
    if (this.held.length) this.emit('revoked', { partitions: this.held })
    this.held = []
  }

  async start() {
    try {
      await this.consumer.connect()
      await this.consumer.subscribe({ topics: config.topics, fromBeginning: true })
      await this.consumer.run({
        autoCommit: false,
        eachMessage: async ({ topic, partition, message }) => this.consume(topic, partition, message),
      })
      this.emit('started')
    } catch (error) {
      this.emit('error', { phase: 'create', ...errorFields(error) })
    }
  }

  async consume(topic, partition, message) {
    const offset = Number(message.offset)
    this.emit('record', { topic, partition, offset })
    const next = String(offset + 1)
    try {
      await this.consumer.commitOffsets([{ topic, partition, offset: next }])
    } catch (error) {
      this.emit('error', { phase: 'commit', ...errorFields(error) })
      throw error // KafkaJS handles it as its application's error: a rebalance makes it rejoin
    }
    this.emit('committed', { offsets: [[topic, partition, offset + 1]] })
  }

  async close() {
    if (this.closed) return
    this.closed = true
    try {
      await this.consumer.disconnect()
    } catch (error) {
      this.emit('error', { phase: 'close', ...errorFields(error) })
    }
    this.held = []
    this.emit('closed')
  }
}

async function main() {
  const members = []
  for (let i = 0; i < (config.members || 1); i++) members.push(new Member(i))
  await Promise.all(members.map(member => member.start()))
  emit('ready')

  let quitting = null
  const quit = async () => {
    quitting = quitting || Promise.all(members.map(member => member.close()))
    await quitting
    emit('exit')
    process.exit(0)
  }
  const lines = readline.createInterface({ input: process.stdin })
  lines.on('line', line => {
    const [command, argument] = line.trim().split(/\s+/)
    if (command === 'quit') {
      quit()
    } else if (command === 'close' && members[Number(argument)]) {
      members[Number(argument)].close()
    } else if (command) {
      emit('error', { phase: 'command', class: 'Error', message: `not a command: ${line}` })
    }
  })
  lines.on('close', quit)
}

main().catch(error => {
  emit('error', { phase: 'create', ...errorFields(error) })
  emit('exit')
  process.exit(1)
})
