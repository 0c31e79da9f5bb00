// Reads a Qt Linguist .ts file into messages, for the translation tests.
#pragma once

#include <QFile>
#include <QString>
#include <QStringList>
#include <QXmlStreamReader>
#include <vector>

namespace odyssey::test {

struct TsMessage {
  QString context, source, comment;
  bool numerus = false;
  QString type;              // "", "unfinished", "vanished", "obsolete"
  QStringList translations;  // one, or one per numerus form

  QString key() const { return context + QChar(0x1f) + source + QChar(0x1f) + comment; }
  QString where() const { return context + QStringLiteral(": \"") + source + QLatin1Char('"'); }
};

// The messages of `path`; on a read or XML error, *error says why and the list is empty.
inline std::vector<TsMessage> read_ts(const QString& path, QString* error) {
  std::vector<TsMessage> out;
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) {
    *error = path + QStringLiteral(": ") + f.errorString();
    return out;
  }
  QXmlStreamReader x(&f);
  QString context;
  while (!x.atEnd()) {
    x.readNext();
    if (!x.isStartElement()) continue;
    if (x.name() == QStringLiteral("name")) {
      context = x.readElementText();
    } else if (x.name() == QStringLiteral("message")) {
      TsMessage m;
      m.context = context;
      m.numerus = x.attributes().value(QStringLiteral("numerus")) == QStringLiteral("yes");
      while (!(x.isEndElement() && x.name() == QStringLiteral("message")) && !x.atEnd()) {
        x.readNext();
        if (!x.isStartElement()) continue;
        if (x.name() == QStringLiteral("source")) {
          m.source = x.readElementText();
        } else if (x.name() == QStringLiteral("comment")) {
          m.comment = x.readElementText();
        } else if (x.name() == QStringLiteral("translation")) {
          m.type = x.attributes().value(QStringLiteral("type")).toString();
          if (m.numerus) {
            while (!(x.isEndElement() && x.name() == QStringLiteral("translation")) && !x.atEnd()) {
              x.readNext();
              if (x.isStartElement() && x.name() == QStringLiteral("numerusform"))
                m.translations << x.readElementText();
            }
          } else {
            m.translations << x.readElementText();
          }
        }
      }
      out.push_back(m);
    }
  }
  if (x.hasError()) {
    *error = QStringLiteral("%1:%2: %3").arg(path).arg(x.lineNumber()).arg(x.errorString());
    out.clear();
  }
  return out;
}

}  // namespace odyssey::test
