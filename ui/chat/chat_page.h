// The Chat page (docs/gui.md, "Chat"): talk to a base model and to any checkpoint (adapter) of
// any run, one at a time or side by side — the same prompt to two panes, each with its own
// adapter and conversation. Answers stream in; system prompt and sampling settings, Stop,
// Regenerate and Clear; the conversations are saved as JSON Lines in the messages format (one
// line per pane), ready to be training data. The engine is `odyssey-train chat --json` in a child
// process (EngineClient), started on first use, reused across prompts and panes (the adapter
// switches inside it), stopped with the page; if it dies the page says so and offers a restart.
#pragma once

#include <QJsonArray>
#include <QJsonObject>
#include <QWidget>

#include <array>
#include <deque>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTextBrowser;

namespace odyssey::ui {

class EngineClient;
class MessageArea;

class ChatPage : public QWidget {
  Q_OBJECT
 public:
  explicit ChatPage(QWidget* parent = nullptr);
  ~ChatPage() override;

  // The model to talk to (a directory or hub id); changing it restarts a running engine.
  void set_model(const QString& model);
  QString model() const;
  // Where runs are (the form's output_dir): their checkpoints are offered as adapters.
  void set_runs_root(const QString& root);
  // Re-reads the runs root for checkpoints (also when the page is shown).
  void refresh_adapters();
  // Pane 0 (left) or 1 (right): the adapter directory ("" = the base model).
  void set_adapter(int pane, const QString& dir);
  QString adapter(int pane) const;
  void set_compare(bool on);

  // What the page's buttons do, for tests and the window's shortcuts.
  void send(const QString& text);
  void stop_answer();
  void regenerate();
  void clear();
  // The conversations as JSON Lines ({"messages": [...]} per pane shown).
  QByteArray conversations_jsonl() const;
  bool save_conversations(const QString& path, QString* error) const;

  // Each pane's transcript as plain text, and whether an answer is being generated.
  QString transcript(int pane) const;
  bool busy() const { return busy_; }
  EngineClient* engine() const { return engine_; }

 Q_SIGNALS:
  void answered(int pane);  // an answer finished (done or failed)
  void engine_ready();
  void engine_lost(const QString& message);

 protected:
  void showEvent(QShowEvent* e) override;

 private:
  struct Pane {
    QComboBox* adapter = nullptr;
    QTextBrowser* view = nullptr;
    QLabel* stats = nullptr;
    QJsonArray messages;  // the conversation, without the system prompt
    QString answer;       // the answer being streamed
  };
  void build();
  void ensure_engine();
  void dispatch();  // the next queued request, when the engine is idle
  void append_turn(int pane, const QString& role, const QString& text);
  void finish_answer(int pane, const QJsonObject& result, const QString& error);
  QJsonObject request_for(int pane) const;
  int pane_of(const QJsonValue& id) const;
  void update_buttons();
  QString runs_root_;
  QLineEdit* model_edit_ = nullptr;
  QPushButton* load_ = nullptr;
  QLabel* engine_status_ = nullptr;
  QCheckBox* compare_ = nullptr;
  QLineEdit* system_ = nullptr;
  QSpinBox* max_new_ = nullptr;
  QDoubleSpinBox* temperature_ = nullptr;
  QDoubleSpinBox* top_p_ = nullptr;
  QSpinBox* top_k_ = nullptr;
  QSpinBox* seed_ = nullptr;
  QPlainTextEdit* input_ = nullptr;
  QPushButton *send_ = nullptr, *stop_ = nullptr, *regenerate_ = nullptr, *clear_ = nullptr, *save_ = nullptr;
  MessageArea* banner_ = nullptr;
  std::array<Pane, 2> panes_;
  std::deque<int> queue_;  // panes waiting for an answer to the last user turn
  int answering_ = -1;     // the pane whose answer streams now
  int next_id_ = 1;
  int current_id_ = 0;
  bool busy_ = false;
  EngineClient* engine_ = nullptr;
};

}  // namespace odyssey::ui
