package zkcoord.spark;

import java.io.Serializable;

/**
 * The source's SASL login with the brokers, as the driver's planner read it
 * (zkcoord/spark/login.py): it travels to executors inside the task's
 * serialized bytes and is never printed (toString leaves the password out).
 */
final class SaslLogin implements Serializable {
  private static final long serialVersionUID = 1L;

  final String user;
  final String password;
  final boolean plainWithoutTls; // SASL/PLAIN may send the password over a connection without TLS

  SaslLogin(String user, String password, boolean plainWithoutTls) {
    this.user = user;
    this.password = password;
    this.plainWithoutTls = plainWithoutTls;
  }

  @Override
  public String toString() {
    return "SaslLogin(user=" + user + ")";
  }
}
