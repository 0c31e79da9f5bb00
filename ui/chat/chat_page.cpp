#include "chat_page.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollBar>
#include <QSaveFile>
#include <QSpinBox>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <algorithm>

#include "chat/checkpoints.h"
#include "chat/engine_client.h"
#include "launch.h"
#include "message_area.h"
#include "palette.h"

namespace odyssey::ui {

namespace {

const QString kBrowse = QStringLiteral("\x01browse");

QString html(const QString& s) { return s.toHtmlEscaped().replace(QLatin1Char('\n'), QStringLiteral("<br>")); }

}  // namespace

ChatPage::ChatPage(QWidget* parent) : QWidget(parent), engine_(new EngineClient(this)) {
  setObjectName(QStringLiteral("chatPage"));
  build();
  connect(engine_, &EngineClient::ready_changed, this, [this](const QJsonObject& info) {
    const QString tmpl = info.value(QStringLiteral("template")).isNull()
                             ? tr("no chat template")
                             : info.value(QStringLiteral("template")).toString();
    engine_status_->setText(tr("Ready: %1 (%2, %3, template %4)")
                                .arg(QFileInfo(info.value(QStringLiteral("model")).toString()).fileName(),
                                     info.value(QStringLiteral("device")).toString(),
                                     info.value(QStringLiteral("dtype")).toString(), tmpl));
    engine_status_->setToolTip(info.value(QStringLiteral("model")).toString());
    banner_->hide();
    update_buttons();
    Q_EMIT engine_ready();
    dispatch();
  });
  connect(engine_, &EngineClient::token, this, [this](const QJsonValue& id, const QString& text) {
    const int p = pane_of(id);
    if (p < 0 || text.isEmpty()) return;
    panes_[static_cast<std::size_t>(p)].answer += text;
    QTextBrowser* v = panes_[static_cast<std::size_t>(p)].view;
    QTextCursor c(v->document());
    c.movePosition(QTextCursor::End);
    c.insertText(text, QTextCharFormat());  // plain, whatever the header before it
    v->verticalScrollBar()->setValue(v->verticalScrollBar()->maximum());
  });
  connect(engine_, &EngineClient::done, this, [this](const QJsonValue& id, const QJsonObject& r) {
    const int p = pane_of(id);
    if (p >= 0) finish_answer(p, r, {});
  });
  connect(engine_, &EngineClient::failed, this, [this](const QJsonValue& id, const QString& message) {
    const int p = pane_of(id);
    if (p >= 0) {
      finish_answer(p, {}, message);
    } else {
      banner_->set_message(html(message), error_color(palette()));
      banner_->show();
    }
  });
  connect(engine_, &EngineClient::exited, this, [this](bool expected, const QString& message) {
    engine_status_->setText(expected ? tr("Engine stopped.") : tr("Engine not running."));
    if (answering_ >= 0) finish_answer(answering_, {}, tr("the engine ended during the answer"));
    queue_.clear();
    busy_ = false;
    if (!expected) {
      banner_->set_message(html(message) + QStringLiteral("<br><a href=\"restart\">") + tr("Restart the engine") +
                               QStringLiteral("</a>"),
                           error_color(palette()));
      banner_->show();
      Q_EMIT engine_lost(message);
    }
    update_buttons();
  });
  connect(banner_, &MessageArea::link_activated, this, [this](const QUrl& url) {
    if (url.toString() == QLatin1String("restart")) {
      banner_->hide();
      ensure_engine();
    }
  });
}

ChatPage::~ChatPage() = default;

void ChatPage::build() {
  auto* v = new QVBoxLayout(this);
  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel(tr("Model:"), this));
  model_edit_ = new QLineEdit(this);
  model_edit_->setObjectName(QStringLiteral("chatModel"));
  model_edit_->setPlaceholderText(tr("a model directory or a hub id in the cache (the Train page's model by default)"));
  top->addWidget(model_edit_, 1);
  auto* browse = new QPushButton(tr("Browse…"), this);
  top->addWidget(browse);
  load_ = new QPushButton(tr("Load"), this);
  load_->setObjectName(QStringLiteral("chatLoad"));
  load_->setToolTip(tr("Start the engine with this model (it also starts on the first message)."));
  top->addWidget(load_);
  v->addLayout(top);
  engine_status_ = new QLabel(tr("Engine not running."), this);
  engine_status_->setObjectName(QStringLiteral("chatEngineStatus"));
  engine_status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  v->addWidget(engine_status_);
  banner_ = new MessageArea(this);
  banner_->setObjectName(QStringLiteral("chatBanner"));
  banner_->hide();
  v->addWidget(banner_);

  auto* grid = new QGridLayout;
  compare_ = new QCheckBox(tr("Side by side"), this);
  compare_->setObjectName(QStringLiteral("chatCompare"));
  compare_->setToolTip(
      tr("Send each message to both panes: compare the base model with a checkpoint, or two checkpoints."));
  for (int i = 0; i < 2; ++i) {
    Pane& p = panes_[static_cast<std::size_t>(i)];
    auto* head = new QHBoxLayout;
    head->addWidget(new QLabel(i == 0 ? tr("Left:") : tr("Right:"), this));
    p.adapter = new QComboBox(this);
    p.adapter->setObjectName(i == 0 ? QStringLiteral("chatAdapterLeft") : QStringLiteral("chatAdapterRight"));
    p.adapter->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    p.adapter->setMinimumContentsLength(16);
    head->addWidget(p.adapter, 1);
    if (i == 1) head->addWidget(compare_);
    grid->addLayout(head, 0, i);
    p.view = new QTextBrowser(this);
    p.view->setObjectName(i == 0 ? QStringLiteral("chatViewLeft") : QStringLiteral("chatViewRight"));
    p.view->setOpenLinks(false);
    grid->addWidget(p.view, 1, i);
    p.stats = new QLabel(this);
    p.stats->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    grid->addWidget(p.stats, 2, i);
    connect(p.adapter, &QComboBox::activated, this, [this, i](int index) {
      QComboBox* box = panes_[static_cast<std::size_t>(i)].adapter;
      if (box->itemData(index).toString() != kBrowse) return;
      const QString dir = QFileDialog::getExistingDirectory(
          this, tr("A LoRA adapter (a directory with adapter_config.json)"), runs_root_);
      if (dir.isEmpty()) box->setCurrentIndex(0);
      else set_adapter(i, dir);
    });
  }
  grid->setColumnStretch(0, 1);
  grid->setColumnStretch(1, 1);
  grid->setRowStretch(1, 1);
  v->addLayout(grid, 1);

  auto* system_row = new QHBoxLayout;
  system_row->addWidget(new QLabel(tr("System prompt:"), this));
  system_ = new QLineEdit(this);
  system_->setObjectName(QStringLiteral("chatSystem"));
  system_row->addWidget(system_, 1);
  v->addLayout(system_row);
  auto* settings = new QHBoxLayout;
  auto spin = [&](const QString& label, QWidget* w) {
    settings->addWidget(new QLabel(label, this));
    settings->addWidget(w);
  };
  max_new_ = new QSpinBox(this);
  max_new_->setObjectName(QStringLiteral("chatMaxNewTokens"));
  max_new_->setRange(1, 32768);
  max_new_->setValue(512);
  spin(tr("Max new tokens"), max_new_);
  temperature_ = new QDoubleSpinBox(this);
  temperature_->setObjectName(QStringLiteral("chatTemperature"));
  temperature_->setRange(0.0, 5.0);
  temperature_->setSingleStep(0.1);
  temperature_->setValue(0.7);
  temperature_->setToolTip(tr("0: greedy (the most likely token every time)"));
  spin(tr("Temperature"), temperature_);
  top_p_ = new QDoubleSpinBox(this);
  top_p_->setObjectName(QStringLiteral("chatTopP"));
  top_p_->setRange(0.01, 1.0);
  top_p_->setSingleStep(0.05);
  top_p_->setValue(0.9);
  spin(tr("Top-p"), top_p_);
  top_k_ = new QSpinBox(this);
  top_k_->setObjectName(QStringLiteral("chatTopK"));
  top_k_->setRange(0, 1000);
  top_k_->setValue(0);
  top_k_->setSpecialValueText(tr("off"));
  spin(tr("Top-k"), top_k_);
  seed_ = new QSpinBox(this);
  seed_->setObjectName(QStringLiteral("chatSeed"));
  seed_->setRange(0, 1'000'000);
  spin(tr("Seed"), seed_);
  settings->addStretch(1);
  v->addLayout(settings);

  auto* bottom = new QHBoxLayout;
  input_ = new QPlainTextEdit(this);
  input_->setObjectName(QStringLiteral("chatInput"));
  input_->setPlaceholderText(tr("Message (Ctrl+Enter sends)"));
  input_->setMaximumHeight(fontMetrics().lineSpacing() * 4 + 12);
  bottom->addWidget(input_, 1);
  auto* buttons = new QGridLayout;
  send_ = new QPushButton(tr("Send"), this);
  send_->setObjectName(QStringLiteral("chatSend"));
  send_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
  stop_ = new QPushButton(tr("Stop"), this);
  stop_->setObjectName(QStringLiteral("chatStop"));
  regenerate_ = new QPushButton(tr("Regenerate"), this);
  clear_ = new QPushButton(tr("Clear"), this);
  save_ = new QPushButton(tr("Save…"), this);
  save_->setToolTip(tr("Save the conversations as JSON Lines in the messages format (one line per pane)."));
  buttons->addWidget(send_, 0, 0);
  buttons->addWidget(stop_, 0, 1);
  buttons->addWidget(regenerate_, 0, 2);
  buttons->addWidget(clear_, 1, 0);
  buttons->addWidget(save_, 1, 1);
  bottom->addLayout(buttons);
  v->addLayout(bottom);

  connect(browse, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("A model directory"), model_edit_->text());
    if (!dir.isEmpty()) set_model(dir);
  });
  connect(load_, &QPushButton::clicked, this, &ChatPage::ensure_engine);
  connect(model_edit_, &QLineEdit::editingFinished, this, [this] { set_model(model_edit_->text()); });
  connect(send_, &QPushButton::clicked, this, [this] {
    const QString t = input_->toPlainText();
    if (t.trimmed().isEmpty()) return;
    input_->clear();
    send(t);
  });
  connect(stop_, &QPushButton::clicked, this, &ChatPage::stop_answer);
  connect(regenerate_, &QPushButton::clicked, this, &ChatPage::regenerate);
  connect(clear_, &QPushButton::clicked, this, &ChatPage::clear);
  connect(save_, &QPushButton::clicked, this, [this] {
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Save the conversations"), runs_root_, tr("JSON Lines (*.jsonl)"));
    if (path.isEmpty()) return;
    QString error;
    if (!save_conversations(path, &error)) {
      banner_->set_message(html(error), error_color(palette()));
      banner_->show();
    }
  });
  connect(compare_, &QCheckBox::toggled, this, [this](bool on) {
    panes_[1].view->setEnabled(on);
    panes_[1].adapter->setEnabled(on);
    update_buttons();
  });
  compare_->setChecked(false);
  panes_[1].view->setEnabled(false);
  panes_[1].adapter->setEnabled(false);
  refresh_adapters();
  update_buttons();
}

void ChatPage::set_model(const QString& model) {
  const QString m = model.trimmed();
  const bool changed = m != model_edit_->text().trimmed() ||
                       (engine_->running() && m != engine_->info().value(QStringLiteral("model")).toString());
  model_edit_->setText(m);
  if (changed && engine_->running()) {
    engine_->stop();
    engine_status_->setText(tr("Model changed: the engine restarts with the next message."));
  }
  update_buttons();
}

QString ChatPage::model() const { return model_edit_->text().trimmed(); }

void ChatPage::set_runs_root(const QString& root) {
  runs_root_ = root;
  refresh_adapters();
}

void ChatPage::refresh_adapters() {
  QList<QPair<QString, QString>> found;  // (label, dir)
  for (const CheckpointEntry& c : list_checkpoints(runs_root_)) found.append({c.label(), c.dir});
  for (auto& p : panes_) {
    const QString keep = p.adapter->currentData().toString();
    QStringList extra;  // adapters picked with Browse… stay
    for (int i = 0; i < p.adapter->count(); ++i) {
      const QString d = p.adapter->itemData(i).toString();
      if (!d.isEmpty() && d != kBrowse && !d.startsWith(runs_root_ + QLatin1Char('/'))) extra << d;
    }
    p.adapter->clear();
    p.adapter->addItem(tr("Base model (no adapter)"), QString());
    for (const auto& [label, dir] : found) p.adapter->addItem(label, dir);
    for (const QString& d : extra) p.adapter->addItem(d, d);
    p.adapter->addItem(tr("Other adapter…"), kBrowse);
    const int at = p.adapter->findData(keep);
    p.adapter->setCurrentIndex(at >= 0 ? at : 0);
  }
}

void ChatPage::set_adapter(int pane, const QString& dir) {
  QComboBox* box = panes_.at(static_cast<std::size_t>(pane)).adapter;
  int at = box->findData(dir);
  if (at < 0) {
    box->insertItem(box->count() - 1, dir, dir);
    at = box->findData(dir);
  }
  box->setCurrentIndex(at);
}

QString ChatPage::adapter(int pane) const {
  const QString d = panes_.at(static_cast<std::size_t>(pane)).adapter->currentData().toString();
  return d == kBrowse ? QString() : d;
}

void ChatPage::set_compare(bool on) { compare_->setChecked(on); }

void ChatPage::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  refresh_adapters();
}

void ChatPage::ensure_engine() {
  if (engine_->running()) return;
  const QString bin = find_train_binary();
  if (bin.isEmpty()) {
    banner_->set_message(tr("odyssey-train was not found (beside this program, in $ODYSSEY_TRAIN_BIN or on PATH)."),
                         error_color(palette()));
    banner_->show();
    return;
  }
  if (model().isEmpty()) {
    banner_->set_message(tr("Choose a model first."), error_color(palette()));
    banner_->show();
    return;
  }
  banner_->hide();
  engine_status_->setText(tr("Loading %1…").arg(model()));
  engine_->start(bin, model());
  update_buttons();
}

QJsonObject ChatPage::request_for(int pane) const {
  const Pane& p = panes_.at(static_cast<std::size_t>(pane));
  QJsonArray messages;
  if (!system_->text().trimmed().isEmpty())
    messages.append(
        QJsonObject{{QStringLiteral("role"), QStringLiteral("system")}, {QStringLiteral("content"), system_->text()}});
  for (const auto& m : p.messages) messages.append(m);
  QJsonObject r{{QStringLiteral("messages"), messages},
                {QStringLiteral("max_new_tokens"), max_new_->value()},
                {QStringLiteral("temperature"), temperature_->value()},
                {QStringLiteral("top_p"), top_p_->value()},
                {QStringLiteral("top_k"), top_k_->value()},
                {QStringLiteral("seed"), seed_->value()}};
  const QString a = adapter(pane);
  r.insert(QStringLiteral("adapter"), a.isEmpty() ? QJsonValue(QJsonValue::Null) : QJsonValue(a));
  return r;
}

int ChatPage::pane_of(const QJsonValue& id) const { return id.toInt(-1) == current_id_ ? answering_ : -1; }

void ChatPage::append_turn(int pane, const QString& role, const QString& text) {
  QTextBrowser* v = panes_.at(static_cast<std::size_t>(pane)).view;
  const QString who = role == QLatin1String("user") ? tr("You") : tr("Model");
  const QColor accent = role == QLatin1String("user") ? palette().color(QPalette::Highlight) : ok_color(palette());
  QTextCursor c(v->document());
  c.movePosition(QTextCursor::End);
  QTextBlockFormat spaced;
  spaced.setTopMargin(v->document()->isEmpty() ? 0 : fontMetrics().height() / 2);
  if (!v->document()->isEmpty()) c.insertBlock(spaced);
  QTextCharFormat head;
  head.setFontWeight(QFont::Bold);
  head.setForeground(accent);
  c.insertText(who, head);
  c.insertBlock(QTextBlockFormat());
  c.insertText(text, QTextCharFormat());
  v->verticalScrollBar()->setValue(v->verticalScrollBar()->maximum());
}

void ChatPage::send(const QString& text) {
  if (busy_) return;
  const int panes = compare_->isChecked() ? 2 : 1;
  for (int i = 0; i < panes; ++i) {
    panes_[static_cast<std::size_t>(i)].messages.append(
        QJsonObject{{QStringLiteral("role"), QStringLiteral("user")}, {QStringLiteral("content"), text}});
    append_turn(i, QStringLiteral("user"), text);
    queue_.push_back(i);
  }
  busy_ = true;
  ensure_engine();
  update_buttons();
  dispatch();
}

void ChatPage::dispatch() {
  if (answering_ >= 0 || queue_.empty() || !engine_->ready()) return;
  answering_ = queue_.front();
  queue_.pop_front();
  current_id_ = next_id_++;
  QJsonObject r = request_for(answering_);
  r.insert(QStringLiteral("id"), current_id_);
  panes_[static_cast<std::size_t>(answering_)].answer.clear();
  append_turn(answering_, QStringLiteral("assistant"), QString());
  panes_[static_cast<std::size_t>(answering_)].stats->setText(tr("Generating…"));
  engine_->send(r);
}

void ChatPage::finish_answer(int pane, const QJsonObject& result, const QString& error) {
  Pane& p = panes_.at(static_cast<std::size_t>(pane));
  if (error.isEmpty()) {
    const QString text = result.value(QStringLiteral("text")).toString();
    p.messages.append(
        QJsonObject{{QStringLiteral("role"), QStringLiteral("assistant")}, {QStringLiteral("content"), text}});
    const QString reason = result.value(QStringLiteral("finish_reason")).toString();
    p.stats->setText(tr("%1 tokens, %2 tokens/s, first token after %3 s%4")
                         .arg(result.value(QStringLiteral("new_tokens")).toInt())
                         .arg(result.value(QStringLiteral("tokens_per_s")).toDouble(), 0, 'f', 1)
                         .arg(result.value(QStringLiteral("time_to_first_token_s")).toDouble(), 0, 'f', 2)
                         .arg(reason == QLatin1String("cancelled") ? tr(" — stopped")
                              : reason == QLatin1String("length")  ? tr(" — cut at the token limit")
                                                                   : QString()));
  } else {
    // The turn stays unanswered in the history: drop the user turn, so a retry sends it again.
    if (!p.messages.isEmpty()) p.messages.removeLast();
    p.stats->setText(tr("No answer: %1").arg(error.section(QLatin1Char('\n'), 0, 0)));
    p.stats->setToolTip(error);
  }
  answering_ = -1;
  if (queue_.empty()) busy_ = false;
  update_buttons();
  Q_EMIT answered(pane);
  dispatch();
}

void ChatPage::stop_answer() {
  queue_.clear();
  if (answering_ >= 0) engine_->cancel();
  else busy_ = false;
  update_buttons();
}

void ChatPage::regenerate() {
  if (busy_) return;
  QString last;
  const int panes = compare_->isChecked() ? 2 : 1;
  for (int i = 0; i < panes; ++i) {
    Pane& p = panes_[static_cast<std::size_t>(i)];
    if (!p.messages.isEmpty() &&
        p.messages.last().toObject().value(QStringLiteral("role")) == QLatin1String("assistant"))
      p.messages.removeLast();
    if (!p.messages.isEmpty()) {
      last = p.messages.last().toObject().value(QStringLiteral("content")).toString();
      p.messages.removeLast();
    }
  }
  if (last.isEmpty()) return;
  // Transcripts show every answer; the regenerated one follows.
  send(last);
}

void ChatPage::clear() {
  stop_answer();
  for (auto& p : panes_) {
    p.messages = QJsonArray();
    p.view->clear();
    p.stats->clear();
  }
  update_buttons();
}

QByteArray ChatPage::conversations_jsonl() const {
  QByteArray out;
  const int panes = compare_->isChecked() ? 2 : 1;
  for (int i = 0; i < panes; ++i) {
    const Pane& p = panes_.at(static_cast<std::size_t>(i));
    if (p.messages.isEmpty()) continue;
    QJsonArray messages;
    if (!system_->text().trimmed().isEmpty())
      messages.append(QJsonObject{{QStringLiteral("role"), QStringLiteral("system")},
                                  {QStringLiteral("content"), system_->text()}});
    for (const auto& m : p.messages) messages.append(m);
    out += QJsonDocument(QJsonObject{{QStringLiteral("messages"), messages}}).toJson(QJsonDocument::Compact) + '\n';
  }
  return out;
}

bool ChatPage::save_conversations(const QString& path, QString* error) const {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly) || f.write(conversations_jsonl()) < 0 || !f.commit()) {
    if (error) *error = tr("%1: cannot be written (%2)").arg(path, f.errorString());
    return false;
  }
  return true;
}

QString ChatPage::transcript(int pane) const { return panes_.at(static_cast<std::size_t>(pane)).view->toPlainText(); }

void ChatPage::update_buttons() {
  const bool has_model = !model().isEmpty();
  send_->setEnabled(has_model && !busy_);
  stop_->setEnabled(busy_);
  bool answered = false;
  for (const auto& p : panes_) answered |= !p.messages.isEmpty();
  regenerate_->setEnabled(!busy_ && answered);
  clear_->setEnabled(answered || busy_);
  save_->setEnabled(answered && !busy_);
  load_->setEnabled(has_model && !engine_->running());
}

}  // namespace odyssey::ui
